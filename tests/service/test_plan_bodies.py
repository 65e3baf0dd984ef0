"""Stored plan bodies (`service.plan_bodies`): encoded once, read back only when intact, kept in
bounded memory per namespace, gzip only for clients that accept it."""

from __future__ import annotations

import gzip
import json

import pytest

from service.plan_bodies import PlanBodies, PlanBody, accepts_gzip

PLAN_ID = "0123456789abcdef0123456789abcdef"


def plan_text(plan_id: str = PLAN_ID, filler: int = 100) -> str:
    return json.dumps({"plan_id": plan_id, "steps": ["é" * filler]}, separators=(",", ":"))


@pytest.mark.parametrize(("header", "expected"), [
    (None, False), ("", False), ("identity", False), ("gzip", True), ("deflate, gzip", True),
    ("gzip;q=0", False), ("GZIP; q=0.5", True), ("*", True), ("*, gzip;q=0", False),
    ("br;q=1.0, *;q=0.1", True), ("x-gzip", True), ("gzip;q=nonsense", False),
])
def test_accept_encoding(header, expected):
    assert accepts_gzip(header) is expected


def test_written_files_read_back_byte_identical(tmp_path):
    bodies = PlanBodies(tmp_path, memory_bytes=1 << 20)
    text = plan_text()
    written = bodies.write(PLAN_ID, text)
    assert written.plan_json == text.encode()
    assert gzip.decompress(written.plan_gzip) == text.encode()
    assert PlanBodies(tmp_path, 0).read(PLAN_ID) == written  # another instance, same folder
    assert bodies.write(PLAN_ID, text).plan_gzip == written.plan_gzip  # deterministic
    assert not list(tmp_path.rglob(".write-*"))


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete", "other_plan"])
def test_damaged_files_are_rebuilt_from_the_store(tmp_path, damage):
    bodies = PlanBodies(tmp_path, memory_bytes=0)
    text = plan_text()
    bodies.write(PLAN_ID, text)
    json_path, gzip_path = bodies.paths(PLAN_ID)
    if damage == "truncate":
        gzip_path.write_bytes(gzip_path.read_bytes()[:-9])
    elif damage == "flip":
        data = bytearray(json_path.read_bytes())
        data[-3] ^= 0x01
        json_path.write_bytes(bytes(data))
    elif damage == "delete":
        json_path.unlink()
    else:
        bodies.write(PLAN_ID, plan_text("f" * 32))
    assert bodies.read(PLAN_ID) is None
    rebuilt = bodies.load(PLAN_ID, lambda: text)
    assert rebuilt is not None and rebuilt.plan_json == text.encode()
    assert bodies.read(PLAN_ID) == rebuilt  # written again


def test_load_without_a_stored_plan(tmp_path):
    assert PlanBodies(tmp_path, 0).load(PLAN_ID, lambda: None) is None


def test_memory_is_per_namespace_and_bounded(tmp_path):
    one = PlanBody.encode(plan_text(filler=2000))
    bodies = PlanBodies(tmp_path, memory_bytes=2 * one.size + 10)
    bodies.remember(PLAN_ID, "alice", one)
    assert bodies.recall(PLAN_ID, "alice") is one
    assert bodies.recall(PLAN_ID, "bob") is None  # never shown to bob: ask the store
    ids = [f"{i:032x}" for i in range(1, 4)]
    for plan_id in ids:
        bodies.remember(plan_id, None, PlanBody.encode(plan_text(plan_id, filler=2000)))
    assert bodies.recall(PLAN_ID, "alice") is None  # the oldest went first
    assert bodies.recall(ids[0], None) is None
    assert [bodies.recall(i, None) is not None for i in ids[1:]] == [True, True]
    bodies.forget(ids[2])
    assert bodies.recall(ids[2], None) is None


def test_no_memory_cache(tmp_path):
    bodies = PlanBodies(tmp_path, memory_bytes=0)
    bodies.remember(PLAN_ID, None, PlanBody.encode(plan_text()))
    assert bodies.recall(PLAN_ID, None) is None


def test_response_follows_accept_encoding():
    body = PlanBody.encode(plan_text())
    plain, packed = body.response(None), body.response("gzip, deflate")
    assert plain.body == body.plan_json and "content-encoding" not in plain.headers
    assert packed.body == body.plan_gzip and packed.headers["content-encoding"] == "gzip"
    for answer in (plain, packed):
        assert answer.headers["vary"] == "Accept-Encoding"
        assert answer.media_type == "application/json"
