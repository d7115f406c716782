"""A ModelSpec for a Hugging Face Hub repository: its config.json and safetensors headers only.

Needs the optional ``huggingface_hub`` package (``pip install 'fitcheck[hub]'``), imported only
when a Hub model is asked for.  What is fetched: ``config.json`` through ``hf_hub_download`` (so
the local Hugging Face cache is used and filled), and the safetensors headers through
``get_safetensors_metadata`` (HTTP range requests for the first bytes of each shard).  Never the
weights.  ``HF_TOKEN``, ``HF_HOME``/``HF_HUB_CACHE``, ``HF_ENDPOINT`` and ``HF_HUB_OFFLINE`` are
honoured by huggingface_hub itself; offline, only the cached config.json is read and stored
bytes stay unknown.

All Hub calls go through a small client object (:class:`HubClient`), so tests replace the
transport with a fake; real huggingface_hub exceptions are translated by class name
(:func:`explain_hub_error`), which works without the package installed.

Helpers other modules share (fitcheck.model.resolve's GGUF repository lookup bounds its Hub calls the same
way): :func:`call_within` runs a call in a worker thread until a deadline and raises
:class:`DeadlineExceeded` past it; :func:`silence_hub_logs` quiets huggingface_hub's retry logging.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from fitcheck.bounded import json_loads_bounded, read_regular_file
from fitcheck.errors import FitcheckError, redact_credentials
from fitcheck.model import safetensors_header
from fitcheck.model.generation_config import FILENAME, MAX_BYTES, GenerationDefaults, from_dict
from fitcheck.model.hf_config import spec_from_config
from fitcheck.model.network import network_refusal
from fitcheck.model.spec import ModelSpec

INSTALL_HINT = "pip install 'fitcheck[hub]'"
# huggingface_hub's validate_repo_id: optional owner, names of [\w.-] up to 96 characters.
_REPO_ID_RE = re.compile(r"^(?:[A-Za-z0-9][\w.-]{0,95}/)?[A-Za-z0-9][\w.-]{0,95}$")
_TRUE = {"1", "on", "yes", "true"}  # huggingface_hub.constants._is_true
# The whole Hub lookup (config.json, then the safetensors headers) gets this many seconds: an endpoint
# that accepts and never answers, or huggingface_hub's own retries (1+2+4+8+8 s), cannot hold a run longer.
HUB_DEADLINE_S = 6.0
# Each HTTP request's own timeout, within that deadline.
HUB_REQUEST_TIMEOUT_S = 4.0


def hub_offline() -> bool:
    """True when HF_HUB_OFFLINE (or the older TRANSFORMERS_OFFLINE) asks for the cache only, or the running code
    refuses the network (fitcheck.model.network.network_refused: `fitcheck serve`)."""
    return network_refusal() is not None or any(os.environ.get(v, "").strip().lower() in _TRUE
                                                for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


class HubClient(Protocol):
    """The two Hub reads fitcheck needs."""

    def config(self, repo_id: str, revision: str | None) -> dict:
        """The parsed config.json of the repository."""

    def safetensors_headers(self, repo_id: str, revision: str | None) -> dict[str, dict]:
        """Raw safetensors header JSON of every weight file: {filename: header dict}."""


class HuggingFaceHubClient:
    """:class:`HubClient` over huggingface_hub (imported on first use)."""

    def __init__(self, timeout_s: float = HUB_REQUEST_TIMEOUT_S):
        self.timeout_s = timeout_s

    @staticmethod
    def _hub():
        try:
            import huggingface_hub
        except ImportError:
            raise FitcheckError("reading a model from the Hugging Face Hub needs huggingface_hub",
                                INSTALL_HINT) from None
        return huggingface_hub

    def config(self, repo_id: str, revision: str | None) -> dict:
        from fitcheck.model.local import read_json_file

        hub = self._hub()
        silence_hub_logs()  # again: importing huggingface_hub configures its logger
        if not hub_offline():
            # One HEAD request, without the library's retries (hf_hub_download retries a refused or
            # silent endpoint five times, 23 s): a network failure is answered from the cache or fails now.
            try:
                hub.get_hf_file_metadata(hub.hf_hub_url(repo_id, "config.json", revision=revision),
                                         timeout=self.timeout_s)
            except Exception as exc:
                if not {cls.__name__ for cls in type(exc).__mro__} & (_TIMEOUTS | _NETWORK):
                    raise
                cached = hub.try_to_load_from_cache(repo_id, "config.json", revision=revision)
                if isinstance(cached, str):
                    return read_json_file(Path(cached), "config.json")
                raise
        path = hub.hf_hub_download(repo_id, "config.json", revision=revision, etag_timeout=self.timeout_s)
        return read_json_file(Path(path), "config.json")

    def generation_config(self, repo_id: str, revision: str | None) -> object | None:
        """The parsed generation_config.json beside config.json (None: the repository has none), fetched
        as config.json is (the cache when offline); bounded like every JSON file fitcheck reads."""
        hub = self._hub()
        try:
            path = hub.hf_hub_download(repo_id, FILENAME, revision=revision, etag_timeout=self.timeout_s)
        except Exception as exc:
            if {cls.__name__ for cls in type(exc).__mro__} & {"EntryNotFoundError", "RemoteEntryNotFoundError"}:
                return None
            raise
        return json_loads_bounded(read_regular_file(Path(path), FILENAME, MAX_BYTES).decode("utf-8-sig"))

    def safetensors_headers(self, repo_id: str, revision: str | None) -> dict[str, dict]:
        meta = self._hub().get_safetensors_metadata(repo_id, revision=revision, timeout=self.timeout_s)
        out: dict[str, dict] = {}
        for filename, file_meta in meta.files_metadata.items():
            doc: dict = {"__metadata__": dict(file_meta.metadata or {})}
            for name, info in file_meta.tensors.items():
                doc[name] = {"dtype": info.dtype, "shape": list(info.shape),
                             "data_offsets": list(info.data_offsets)}
            out[filename] = doc
        return out

# ---- errors -----------------------------------------------------------------------------------


_TIMEOUTS = {"TimeoutException", "ReadTimeout", "ConnectTimeout", "WriteTimeout", "PoolTimeout",
             "Timeout", "TimeoutError"}
_NETWORK = {"ConnectError", "ConnectionError", "NetworkError", "TransportError", "RemoteProtocolError",
            "ProxyError", "SSLError"}


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


def explain_hub_error(exc: BaseException, repo_id: str, *, revision: str | None = None,
                      offline: bool = False) -> FitcheckError:
    """One line (and what to do) for an exception from a Hub call, by class name and status."""
    if isinstance(exc, FitcheckError):
        return exc
    status = _status(exc)
    for name in (cls.__name__ for cls in type(exc).__mro__):  # most specific class first
        found = _by_class(name, repo_id, revision, offline, status)
        if found is not None:
            return found
    return _by_status(exc, repo_id, status)


def _by_class(name: str, repo_id: str, revision: str | None, offline: bool, status: int | None) -> FitcheckError | None:
    """The error for a huggingface_hub exception class called ``name`` (None: not one it names)."""
    page = f"https://huggingface.co/{repo_id}"
    if name == "GatedRepoError":
        return FitcheckError(f"{repo_id} is gated on the Hugging Face Hub",
                             f"accept the licence on {page} and set HF_TOKEN")
    if name == "DisabledRepoError":
        return FitcheckError(f"{repo_id} has been disabled on the Hugging Face Hub")
    if name == "RevisionNotFoundError":
        return FitcheckError(f"revision {revision!r} not found in {repo_id}",
                             "check the branch, tag or commit")
    if name in ("LocalEntryNotFoundError", "OfflineModeIsEnabled"):
        if offline:
            return FitcheckError(f"HF_HUB_OFFLINE is set and {repo_id}'s config.json is not in the "
                                 "Hugging Face cache",
                                 "run once online, or point at a local model folder")
        return FitcheckError(f"cannot reach the Hugging Face Hub and {repo_id}'s config.json is not cached",
                             "check the network (or HF_ENDPOINT), or point at a local model folder")
    if name == "RepositoryNotFoundError":
        if status in (401, 403):
            return FitcheckError(f"{repo_id} not found on the Hugging Face Hub, or it is private (HTTP {status})",
                                 "check the id; for a private or gated model set HF_TOKEN; "
                                 "try `fitcheck models QUERY`")
        return FitcheckError(f"{repo_id} not found on the Hugging Face Hub",
                             "check the id (owner/name); try `fitcheck models QUERY`")
    if name in ("EntryNotFoundError", "RemoteEntryNotFoundError"):
        return FitcheckError(f"{repo_id} has no config.json",
                             "fitcheck reads transformers models; for a GGUF repo, download the "
                             ".gguf and point at the file")
    if name in _TIMEOUTS:
        return FitcheckError("timed out talking to the Hugging Face Hub",
                             "check the network, or set HF_HUB_OFFLINE=1 to use the cache")
    if name in _NETWORK:
        return FitcheckError("cannot reach the Hugging Face Hub",
                             "check the network (or HF_ENDPOINT), or set HF_HUB_OFFLINE=1 to use the cache")
    return None


def _by_status(exc: BaseException, repo_id: str, status: int | None) -> FitcheckError:
    """The error by HTTP status, else the exception's own words (credentials redacted)."""
    page = f"https://huggingface.co/{repo_id}"
    if status in (401, 403):
        return FitcheckError(f"access to {repo_id} denied (HTTP {status})",
                             f"accept the licence on {page} and set HF_TOKEN")
    if status == 404:
        return FitcheckError(f"{repo_id} not found on the Hugging Face Hub",
                             "check the id (owner/name); try `fitcheck models QUERY`")
    if status == 429:
        return FitcheckError("the Hugging Face Hub is rate-limiting requests (HTTP 429)",
                             "wait a minute, or set HF_TOKEN")
    detail = redact_credentials(" ".join(str(exc).split()))[:160]
    return FitcheckError(f"Hugging Face Hub request for {repo_id} failed: {type(exc).__name__}: {detail}",
                         "try again, or point at a local model folder")


# Failures of the safetensors metadata read after config.json was read: the spec is still useful
# (stored bytes then come from parameters x dtype), so these only leave a note.
_METADATA_SOFT = {"NotASafetensorsRepoError", "OfflineModeIsEnabled", "SafetensorsParsingError",
                  "EntryNotFoundError", "RemoteEntryNotFoundError"} | _TIMEOUTS | _NETWORK

# ---- entry point ------------------------------------------------------------------------------


class DeadlineExceeded(Exception):
    """call_within's call did not return by its deadline."""


def call_within(deadline: float, call, *args):
    """``call(*args)`` in a worker thread, given until ``deadline`` (time.monotonic()); its result, or
    its exception re-raised here, or DeadlineExceeded (the thread is left behind as a daemon)."""
    box: dict = {}

    def run() -> None:
        try:
            box["value"] = call(*args)
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=run, name="fitcheck-hub", daemon=True)
    worker.start()
    worker.join(max(deadline - time.monotonic(), 0.0))
    if worker.is_alive():
        raise DeadlineExceeded()
    if "error" in box:
        raise box["error"]
    return box.get("value")


def silence_hub_logs() -> None:
    """huggingface_hub logs each retry ("Retrying in 1s [Retry 1/5]", with the URL): fitcheck's one line
    says what happened instead."""
    for name in ("huggingface_hub", "httpx", "httpcore", "urllib3"):
        logger = logging.getLogger(name)
        logger.setLevel(logging.CRITICAL + 1)
        logger.propagate = False


def spec_from_hub(repo_id: str, *, revision: str | None = None,
                  client: HubClient | None = None, deadline_s: float = HUB_DEADLINE_S) -> ModelSpec:
    """ModelSpec of a Hub repository from its config.json and safetensors headers.

    Stored bytes and format are exact when the safetensors metadata can be read; offline, or for
    a repository without safetensors, they are left unknown and ``sources`` says why.
    """
    if not isinstance(repo_id, str) or not _REPO_ID_RE.match(repo_id) or ".." in repo_id:
        raise FitcheckError(f"{str(repo_id)[:100]!r} is not a Hugging Face model id",
                            "use owner/name, e.g. Qwen/Qwen2.5-7B-Instruct")
    offline = hub_offline()
    client = client if client is not None else HuggingFaceHubClient()
    silence_hub_logs()
    deadline = time.monotonic() + deadline_s
    timed_out = FitcheckError(f"no answer from the Hugging Face Hub within {deadline_s:g} s for {repo_id}",
                              "check the network (or HF_ENDPOINT), set HF_HUB_OFFLINE=1 to use the cache, "
                              "or point at a local model folder")
    try:
        config = call_within(deadline, client.config, repo_id, revision)
    except DeadlineExceeded:
        raise timed_out from None
    except Exception as exc:  # every failure of the transport becomes one line
        raise explain_hub_error(exc, repo_id, revision=revision, offline=offline) from None
    where = f"{repo_id}/config.json (Hugging Face Hub)"
    spec = spec_from_config(config, repo_id, source=where)
    # the weights' metadata first: generation_config.json (a sampling detail) takes what is left of the deadline
    spec = _with_safetensors(spec, client, repo_id, revision, deadline, deadline_s, offline)
    return _with_generation(spec, client, repo_id, revision, deadline)


def _with_safetensors(spec: ModelSpec, client: HubClient, repo_id: str, revision: str | None, deadline: float,
                      deadline_s: float, offline: bool) -> ModelSpec:
    """``spec`` with the stored bytes from the repository's safetensors headers, or a note saying why not."""
    from fitcheck.model.local import stored_weights, with_stored

    if offline:
        return _note(spec, "HF_HUB_OFFLINE is set: safetensors metadata not fetched")
    try:
        raw = call_within(deadline, client.safetensors_headers, repo_id, revision)
    except DeadlineExceeded:
        return _note(spec, f"safetensors metadata not read (no answer within {deadline_s:g} s)")
    except Exception as exc:
        names = {cls.__name__ for cls in type(exc).__mro__}
        if names & _METADATA_SOFT and not isinstance(exc, FitcheckError):
            return _note(spec, f"safetensors metadata not read ({type(exc).__name__})")
        raise explain_hub_error(exc, repo_id, revision=revision, offline=offline) from None
    if not raw:
        return _note(spec, "no safetensors files in the repository")
    headers = {f: safetensors_header.header_from_json(doc, source=f"{repo_id}/{f}")
               for f, doc in raw.items()}
    return with_stored(spec, stored_weights(headers), "Hugging Face Hub safetensors metadata")


def _with_generation(spec: ModelSpec, client: HubClient, repo_id: str, revision: str | None,
                     deadline: float) -> ModelSpec:
    """``spec`` with the repository's generation_config.json (generate()'s default sampling), read the way
    config.json was, within the same deadline; without it (none, a client that does not read it, a
    failure) the estimate keeps its default sampling."""
    reader = getattr(client, "generation_config", None)
    if reader is None:
        return spec
    where = f"{repo_id}/{FILENAME} (Hugging Face Hub)"
    try:
        doc = call_within(deadline, reader, repo_id, revision)
    except DeadlineExceeded:
        return replace(spec, generation=GenerationDefaults(where, problem="no answer within the deadline"))
    except Exception as exc:  # noqa: BLE001 - the sampling falls back to the default, said why
        return replace(spec, generation=GenerationDefaults(where, problem=f"not read ({type(exc).__name__})"))
    return spec if doc is None else replace(spec, generation=from_dict(doc, where))


def _note(spec: ModelSpec, why: str) -> ModelSpec:
    return replace(spec, sources=tuple(spec.sources) + (("stored_weight_bytes", f"unknown: {why}"),))
