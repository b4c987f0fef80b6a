"""A deadline for every request this process makes to the Hugging Face hub, and the words when one passes.

huggingface_hub bounds its metadata requests by ``HF_HUB_ETAG_TIMEOUT`` and its downloads by
``HF_HUB_DOWNLOAD_TIMEOUT``, but sends some requests with no timeout at all: ``snapshot_download``'s
``repo_info`` and tree listing, and what ``datasets`` asks through it. Against an endpoint that accepts the
connection and never answers, those wait forever. :func:`bound_hub_requests` gives them
``HF_HUB_ETAG_TIMEOUT`` too; the commands name that setting when it passes (:func:`no_answer`).
"""

from __future__ import annotations


def hub_timeout_s() -> float:
    """Seconds a hub request without its own timeout may wait for an answer: huggingface_hub's
    ``HF_HUB_ETAG_TIMEOUT`` (10 by default), the limit it gives its own metadata requests."""
    from huggingface_hub import constants

    return float(constants.HF_HUB_ETAG_TIMEOUT)


def _fill_timeout(request) -> None:
    """An httpx request hook: a request sent with no timeout at all gets ``hub_timeout_s()`` (connect, read,
    write, pool); a request with its own timeout keeps it (downloads: ``HF_HUB_DOWNLOAD_TIMEOUT``)."""
    timeout = request.extensions.get("timeout") or {}
    if all(value is None for value in timeout.values()):
        limit = hub_timeout_s()
        request.extensions["timeout"] = {"connect": limit, "read": limit, "write": limit, "pool": limit}


def bound_hub_requests() -> None:
    """Give every request of huggingface_hub's shared client a deadline (call it before the hub calls: a
    client huggingface_hub starts afresh, e.g. after a fork, needs it again).

    ``snapshot_download`` asks ``repo_info`` and ``list_repo_tree`` with no timeout: against an endpoint
    that accepts the connection and never answers, it waits forever. The client keeps its own hooks and
    gets one more that bounds each such request by ``HF_HUB_ETAG_TIMEOUT``.
    """
    from huggingface_hub.utils import get_session

    session = get_session()
    hooks = session.event_hooks
    if _fill_timeout not in hooks["request"]:
        session.event_hooks = {**hooks, "request": [*hooks["request"], _fill_timeout]}


def no_answer(timeout_s: float) -> str:
    """The words for a hub that did not answer in time, naming the setting to raise."""
    return f"no answer within {timeout_s:g} s; raise HF_HUB_ETAG_TIMEOUT if the hub is only slow"
