"""OpenTelemetry traces of a real `latchkey serve --dev`, received by an OTLP/HTTP receiver written here with
OpenTelemetry's own protobuf definitions (opentelemetry-proto from PyPI), sharing no code with Latchkey.

A sign-in that arrives with a W3C `traceparent` must continue that trace: the server's span is the caller's child,
the sign-in's steps (token verification, the provider call, the store transaction) are spans under it, the outbound
call to the provider is a client span, and the provider (the emulator) receives a `traceparent` of the same trace.
Log lines carry the trace and span ids."""

from __future__ import annotations

import hashlib
import json
import secrets
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
import latchkey_process  # noqa: E402


class Receiver:
    """An OTLP/HTTP collector on loopback: keeps every span POSTed to /v1/traces, with its service name."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, trace_pb2.Span]] = []
        self.content_types: list[str] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                request = trace_service_pb2.ExportTraceServiceRequest()
                request.ParseFromString(body)
                with receiver.lock:
                    receiver.content_types.append(self.headers.get("Content-Type", ""))
                    for resource_spans in request.resource_spans:
                        service = next(
                            (a.value.string_value for a in resource_spans.resource.attributes if a.key == "service.name"), "")
                        for scope_spans in resource_spans.scope_spans:
                            receiver.spans.extend((service, span) for span in scope_spans.spans)
                answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200 if self.path == "/v1/traces" else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *arguments) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def trace(self, trace_id: bytes, names: set[str], timeout: float = 30) -> list[trace_pb2.Span]:
        """The spans of one trace, once every name in `names` has arrived."""
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                spans = [span for _, span in self.spans if span.trace_id == trace_id]
            if names <= {span.name for span in spans} or time.monotonic() > deadline:
                return spans
            time.sleep(0.1)


def post(url: str, body: dict, headers: dict[str, str]) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


@pytest.fixture(scope="module")
def receiver() -> Receiver:
    made = Receiver()
    yield made
    made.server.shutdown()


@pytest.fixture(scope="module")
def server(receiver: Receiver):
    settings = {
        "LATCHKEY_OTEL_ENDPOINT": receiver.url, "LATCHKEY_OTEL_SERVICE_NAME": "latchkey-under-test",
        "LATCHKEY_LOG_FORMAT": "json", "LATCHKEY_LOG_LEVEL": "debug",
        # The batch span processor's delay, from the OpenTelemetry specification's variables (5 s by default).
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    with latchkey_process.serve(settings, dev=True, prefix="latchkey-otel-") as served:
        yield served


def test_a_sign_in_continues_the_callers_trace_with_its_steps_and_the_provider_call(receiver: Receiver, server) -> None:
    emulator = f"http://127.0.0.1:{server.emulator_port}"
    status, user = latchkey_process.call(f"{emulator}/emulator/users", {})
    assert status == 201, user
    raw_nonce = secrets.token_urlsafe(24)
    status, authorization = latchkey_process.call(
        f"{emulator}/emulator/authorizations",
        {"sub": user["sub"], "clientId": "com.example.app", "nonce": hashlib.sha256(raw_nonce.encode()).hexdigest()})
    assert status == 201, authorization

    trace_id, parent_id = secrets.token_bytes(16), secrets.token_bytes(8)
    traceparent = f"00-{trace_id.hex()}-{parent_id.hex()}-01"
    status, answer = post(
        server.url + "/v1/auth/apple",
        {"identityToken": authorization["identityToken"], "rawNonce": raw_nonce, "authorizationCode": authorization["authorizationCode"]},
        {"traceparent": traceparent})
    assert status == 200, answer

    steps = {"sign-in token verification", "sign-in provider call", "sign-in store transaction"}
    spans = receiver.trace(trace_id, steps | {"/v1/auth/apple"})
    by_id = {span.span_id: span for span in spans}
    names = sorted(span.name for span in spans)
    assert steps <= set(names), names
    assert all(content_type == "application/x-protobuf" for content_type in receiver.content_types), receiver.content_types
    assert {service for service, span in receiver.spans if span.trace_id == trace_id} == {"latchkey-under-test"}

    # The server span is the caller's child; every other span descends from it.
    roots = [span for span in spans if span.parent_span_id == parent_id]
    # Hummingbird's TracingMiddleware names the request's span by its route.
    assert [span.name for span in roots] == ["/v1/auth/apple"], names
    root = roots[0]
    assert root.kind == trace_pb2.Span.SPAN_KIND_SERVER

    def ancestors(span: trace_pb2.Span) -> list[bytes]:
        chain = []
        while span.parent_span_id in by_id:
            chain.append(span.parent_span_id)
            span = by_id[span.parent_span_id]
        return chain

    for span in spans:
        if span is not root:
            assert root.span_id in ancestors(span), f"{span.name} is not under the request's span"

    # Apple's code exchange: a client span under the provider-call step, with only the host and path recorded.
    step = next(span for span in spans if span.name == "sign-in provider call")
    clients = [span for span in spans if span.kind == trace_pb2.Span.SPAN_KIND_CLIENT and step.span_id in ancestors(span)]
    assert clients, names
    attributes = {a.key: a.value for a in clients[0].attributes}
    assert attributes["url.path"].string_value == "/auth/token"
    assert "url.full" not in attributes

    # The provider received the same trace, with the client span as its parent.
    deadline = time.monotonic() + 10
    while True:
        status, log = latchkey_process.call(f"{emulator}/emulator/requests", method="GET")
        entries = log if isinstance(log, list) else log.get("requests", [])
        exchanges = [entry for entry in entries if entry.get("endpoint") == "/auth/token" and entry.get("traceparent")]
        if exchanges or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert exchanges, entries
    version, received_trace, received_parent, flags = exchanges[-1]["traceparent"].split("-")
    assert received_trace == trace_id.hex()
    assert bytes.fromhex(received_parent) in {span.span_id for span in clients}

    # Log lines written while the request ran carry its trace id.
    time.sleep(0.2)
    logged = [json.loads(line) for line in server.output if line.startswith("{")]
    assert any(line.get("trace_id") == trace_id.hex() and line.get("span_id") for line in logged), server.output[-20:]


def test_a_rotation_is_a_span_and_a_request_without_traceparent_starts_a_trace(receiver: Receiver, server) -> None:
    answer = latchkey_process.apple_sign_in(f"http://127.0.0.1:{server.emulator_port}", server.url, "com.example.app")
    status, rotated = latchkey_process.call(server.url + "/v1/token", form={"grant_type": "refresh_token", "refresh_token": answer["refreshToken"]})
    assert status == 200, rotated
    deadline = time.monotonic() + 30
    while True:
        with receiver.lock:
            rotations = [span for _, span in receiver.spans if span.name == "refresh token rotation"]
        if rotations or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert rotations
    with receiver.lock:
        parents = {span.span_id: span for _, span in receiver.spans if span.trace_id == rotations[-1].trace_id}
    parent = parents.get(rotations[-1].parent_span_id)
    assert parent is not None and parent.name == "/v1/token" and parent.kind == trace_pb2.Span.SPAN_KIND_SERVER
    assert not parent.parent_span_id
