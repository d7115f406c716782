"""The Hub without a network: the whole lookup is bounded, one line, no library log lines, no credentials."""

import socket
import threading
import time

import pytest

from fitcheck.errors import FitcheckError, redact_credentials
from fitcheck.model import hub


class _SlowClient:
    def config(self, repo_id, revision):
        time.sleep(5)
        return {}

    def safetensors_headers(self, repo_id, revision):  # pragma: no cover - never reached
        return {}


def test_a_client_that_never_answers_is_cut_at_the_deadline():
    start = time.monotonic()
    with pytest.raises(FitcheckError, match="no answer from the Hugging Face Hub within 0.5 s"):
        hub.spec_from_hub("org/model", client=_SlowClient(), deadline_s=0.5)
    assert time.monotonic() - start < 2


def test_credentials_in_urls_are_redacted():
    text = "'Connection refused' thrown while requesting HEAD http://user:TOKEN@127.0.0.1:1/x/resolve/main/config.json"
    assert "TOKEN" not in redact_credentials(text) and "http://***@127.0.0.1:1/x" in redact_credentials(text)
    err = hub.explain_hub_error(RuntimeError(text), "org/model")
    assert "TOKEN" not in err.one_line()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def silent_endpoint():
    """An HTTP endpoint on loopback that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held = []
    stop = threading.Event()

    def accept():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    t.join(2)
    for c in held:
        c.close()
    server.close()


def _real_hub(monkeypatch, tmp_path, endpoint: str):
    pytest.importorskip("huggingface_hub")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://user:TOKEN@{endpoint}")
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "ENDPOINT", f"http://user:TOKEN@{endpoint}", raising=False)
    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"), raising=False)


def test_refusing_endpoint_fails_fast_without_retry_lines(monkeypatch, tmp_path, capfd):
    _real_hub(monkeypatch, tmp_path, f"127.0.0.1:{_free_port()}")
    start = time.monotonic()
    with pytest.raises(FitcheckError) as info:
        hub.spec_from_hub("someorg/no-such-model", deadline_s=3)
    assert time.monotonic() - start < 3.5
    out, err = capfd.readouterr()
    assert "Retrying" not in out + err and "TOKEN" not in out + err + info.value.one_line()


def test_silent_endpoint_is_bounded_by_the_deadline(monkeypatch, tmp_path, capfd, silent_endpoint):
    _real_hub(monkeypatch, tmp_path, silent_endpoint)
    start = time.monotonic()
    with pytest.raises(FitcheckError) as info:
        hub.spec_from_hub("someorg/no-such-model", deadline_s=1.5)
    assert time.monotonic() - start < 3
    out, err = capfd.readouterr()
    assert "TOKEN" not in out + err + info.value.one_line() and "Retrying" not in out + err
