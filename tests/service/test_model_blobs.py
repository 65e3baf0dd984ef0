"""The content-addressed model store alone: uploads in progress, stale ones, damaged blobs."""

from __future__ import annotations

import hashlib
import os
import time

from service.blobs import STALE_UPLOAD_AGE_S, ModelBlobs


def test_a_second_instance_keeps_the_first_ones_uploads_in_flight(tmp_path):
    """Issue 15, F4: two instances share one model folder; the second one's start must not
    delete the upload the first one is receiving."""
    first = ModelBlobs(tmp_path)
    upload = first.new_upload()
    upload.write(b"half a model")
    ModelBlobs(tmp_path).remove_stale_uploads()  # the second instance starts
    upload.write(b" and the rest")
    sha = upload.commit()
    assert sha == hashlib.sha256(b"half a model and the rest").hexdigest()
    assert first.path_for(sha).read_bytes() == b"half a model and the rest"


def test_stale_uploads_are_removed(tmp_path):
    blobs = ModelBlobs(tmp_path)
    old = blobs.tmp / "upload-abandoned"  # an old name without an owner, idle for long
    old.write_bytes(b"x")
    then = time.time() - STALE_UPLOAD_AGE_S - 60
    os.utime(old, (then, then))
    orphan = blobs.tmp / f"upload-{blobs.host}-{2**22 + 1}-abcd1234"  # no such process
    orphan.write_bytes(b"y")
    live = blobs.new_upload()
    live.write(b"z")
    assert blobs.remove_stale_uploads() == 2
    assert not old.exists() and not orphan.exists()
    live.commit()
