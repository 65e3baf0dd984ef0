"""Reading `POST /plan`'s multipart body as it streams in, with size limits enforced on the way.

The body is never buffered whole: the `model` part goes chunk by chunk into the model store
(hashed on the way, refused the moment it passes `max_upload_bytes`), the `request` part (the
PlanRequest JSON, at most `max_request_bytes`) into memory. A declared Content-Length over the
limits is refused before reading anything.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fastapi import Request
from pydantic import ValidationError
from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import ClientDisconnect

from schemas.optimized_graph import SERVICE_DEFAULT
from schemas.plan import PlanRequest
from schemas.units import format_bytes
from service.blobs import BlobWriter, ModelBlobs
from service.errors import ApiProblem
from service.settings import Settings

if TYPE_CHECKING:  # python-multipart declares its callbacks' TypedDict for type checkers only
    from python_multipart.multipart import MultipartCallbacks

FIELDS_HINT = ("send multipart/form-data with two fields: 'model' (the ONNX file) and "
               "'request' (the PlanRequest JSON, see /docs)")
MULTIPART_OVERHEAD = 1 << 20  # boundaries and part headers, generously


@dataclass
class PlanUpload:
    """A stored model and the validated request that came with it."""

    model_sha256: str
    model_bytes: int
    request: PlanRequest


@dataclass
class _Part:
    headers: dict[bytes, bytes] = field(default_factory=dict)
    name: str | None = None


class _BodyReader:
    """python-multipart callbacks: route each part's bytes to its destination."""

    def __init__(self, settings: Settings, blobs: ModelBlobs):
        self.settings, self.blobs = settings, blobs
        self.part = _Part()
        self._field, self._value = b"", b""
        self.model: BlobWriter | None = None
        self.request_json = bytearray()
        self.seen: set[str] = set()
        self.finished = False

    def callbacks(self) -> MultipartCallbacks:
        return {
            "on_part_begin": self.on_part_begin, "on_header_field": self.on_header_field,
            "on_header_value": self.on_header_value, "on_header_end": self.on_header_end,
            "on_headers_finished": self.on_headers_finished, "on_part_data": self.on_part_data,
            "on_end": self.on_end,
        }

    def on_part_begin(self) -> None:
        self.part = _Part()

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._field += data[start:end]

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._value += data[start:end]

    def on_header_end(self) -> None:
        self.part.headers[self._field.lower()] = self._value
        self._field, self._value = b"", b""

    def on_headers_finished(self) -> None:
        disposition, options = parse_options_header(
            self.part.headers.get(b"content-disposition"))
        name = options.get(b"name", b"").decode("utf-8", "replace")
        if disposition != b"form-data" or not name:
            raise ApiProblem(400, "bad_request", f"a part has no form-data name; {FIELDS_HINT}")
        if name not in ("model", "request"):
            raise ApiProblem(422, "bad_request", f"unexpected form field {name!r}; {FIELDS_HINT}")
        if name in self.seen:
            raise ApiProblem(422, "bad_request", f"form field {name!r} is given twice; "
                             f"{FIELDS_HINT}")
        self.seen.add(name)
        self.part.name = name
        if name == "model":
            self.model = self.blobs.new_upload()

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        chunk = data[start:end]
        if self.part.name == "model":
            assert self.model is not None
            if self.model.size + len(chunk) > self.settings.max_upload_bytes:
                raise _too_large("the model", self.settings.max_upload_bytes,
                                 "ARENAPLAN_MAX_UPLOAD_BYTES")
            self.model.write(chunk)
        else:
            if len(self.request_json) + len(chunk) > self.settings.max_request_bytes:
                raise _too_large("the request JSON", self.settings.max_request_bytes,
                                 "ARENAPLAN_MAX_REQUEST_BYTES")
            self.request_json += chunk

    def on_end(self) -> None:
        self.finished = True


def _too_large(what: str, limit: int, variable: str) -> ApiProblem:
    return ApiProblem(413, "too_large", f"{what} is larger than this service accepts "
                      f"({format_bytes(limit)}, set by {variable}); send a smaller one")


def _check_headers(request: Request, settings: Settings) -> bytes:
    content_type, options = parse_options_header(request.headers.get("content-type"))
    if content_type != b"multipart/form-data" or not options.get(b"boundary"):
        raise ApiProblem(415, "unsupported_media_type", FIELDS_HINT)
    length = request.headers.get("content-length")
    limit = settings.max_upload_bytes + settings.max_request_bytes + MULTIPART_OVERHEAD
    if length is not None and length.strip().isdigit() and int(length) > limit:
        raise ApiProblem(413, "too_large",
                         f"the upload is {format_bytes(int(length))}; this service accepts "
                         f"models up to {format_bytes(settings.max_upload_bytes)} "
                         "(ARENAPLAN_MAX_UPLOAD_BYTES); send a smaller model")
    return options[b"boundary"]


def parse_plan_request(text: bytes, settings: Settings) -> PlanRequest:
    """The `request` field -> PlanRequest, with one line per problem and the server's limits."""
    try:
        request = PlanRequest.model_validate_json(text)
    except ValidationError as exc:
        lines = []
        for error in exc.errors(include_url=False):
            where = ".".join(str(p) for p in error["loc"]) or "request"
            lines.append(f"{where}: {error['msg']}")
        raise ApiProblem(422, "invalid_request",
                         "the request JSON is not a valid PlanRequest: " + "; ".join(lines)
                         + " (schema at /docs)", errors=lines) from None
    if request.time_limit_s > settings.max_time_limit_s:
        raise ApiProblem(422, "invalid_request",
                         f"time_limit_s {request.time_limit_s:g} is above this service's limit "
                         f"of {settings.max_time_limit_s:g} s; ask for less")
    if "graph_optimization" not in request.model_fields_set:  # the plan id covers the level used
        request = request.model_copy(update={"graph_optimization": SERVICE_DEFAULT})
    return request


async def _chunks(request: Request, settings: Settings) -> AsyncIterator[bytes]:
    """The body's chunks; 408 when the client sends nothing for `body_read_timeout_s`."""
    stream = request.stream()
    while True:
        try:
            chunk = await asyncio.wait_for(anext(stream), settings.body_read_timeout_s)
        except StopAsyncIteration:
            return
        except asyncio.TimeoutError:
            raise ApiProblem(
                408, "timeout", f"the upload stalled: no bytes for "
                f"{settings.body_read_timeout_s:g} s (ARENAPLAN_BODY_READ_TIMEOUT_S); send it "
                "again", headers={"Connection": "close"}) from None
        yield chunk


async def read_plan_upload(request: Request, settings: Settings, blobs: ModelBlobs) -> PlanUpload:
    """Stream the body in; store the model by content; validate the request JSON."""
    boundary = _check_headers(request, settings)
    reader = _BodyReader(settings, blobs)
    try:
        try:
            parser = MultipartParser(boundary, reader.callbacks())
            async for chunk in _chunks(request, settings):
                parser.write(chunk)
            parser.finalize()
        except FormParserError as exc:
            raise ApiProblem(400, "bad_request",
                             f"malformed multipart body ({exc}); {FIELDS_HINT}") from None
        except ClientDisconnect:
            raise ApiProblem(400, "bad_request", "the upload was cut off before its end; "
                             "send it again") from None
        if not reader.finished:
            raise ApiProblem(400, "bad_request", f"the multipart body ended early; {FIELDS_HINT}")
        missing = [name for name in ("model", "request") if name not in reader.seen]
        if missing:
            raise ApiProblem(422, "bad_request", f"missing form field(s) {', '.join(missing)}; "
                             f"{FIELDS_HINT}")
        assert reader.model is not None
        if reader.model.size == 0:
            raise ApiProblem(422, "invalid_model", "the model file is empty; send the .onnx "
                             "training graph's bytes")
        plan_request = parse_plan_request(bytes(reader.request_json), settings)
        size = reader.model.size
        sha256 = reader.model.commit()
    except BaseException:
        if reader.model is not None:
            reader.model.discard()
        raise
    return PlanUpload(model_sha256=sha256, model_bytes=size, request=plan_request)
