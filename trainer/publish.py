"""``acep train --publish``: the signed sketch ``PUT`` to the collector, and the check
before the job that the collector answers and takes the admin token.

Every failure is one line (:class:`RuntimeError`): no answer, an error status with the
collector's ``error`` text, or an answer no acep collector gives (a web server's page at
that address) with its first bytes. Answers are read to a bound, and a redirect is never
followed: the token would go along to wherever it points. A pattern id the collector
would refuse is a ``ValueError`` before any request.

The timeout (``publish_sketch``'s, ``check_publisher``'s) bounds each wait; over https,
connecting, a proxy's tunnel (``https_proxy``) and the TLS handshake are one wait
(:class:`acep._https.HTTPSWithin`).
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.parse
import urllib.request

from acep.ids import ID_RULE, valid_id
from acep.utils import HTTPSWithinHandler, one_line

__all__ = ["collector_tls", "publish_sketch", "check_publisher", "ANSWER_BYTES"]

ANSWER_BYTES = 1 << 20  # of the collector's answer to --publish (a JSON line of a few hundred)
CHECK_TIMEOUT = 10.0  # seconds for the check before the job
NOT_A_COLLECTOR = "not an acep collector's answer"


def collector_tls(url: str, ca_file: str | None):
    """The ``ssl.SSLContext`` an https ``url`` is verified with (the system's CAs, or
    ``ca_file`` alone), None for http; ``ValueError`` when ``ca_file`` does not load."""
    import ssl

    if not url.lower().startswith("https://"):
        return None
    try:
        return ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as e:
        raise ValueError(f"--ca-file {ca_file}: not a readable PEM certificate file "
                         f"({e})") from None


def publish_sketch(url: str, pattern_id: str, data: bytes, token: str,
                   timeout: float = 30.0, unchecked: bool = False,
                   ca_file: str | None = None) -> dict:
    """``PUT`` a signed sketch to the collector at ``url``; its JSON answer. The collector
    refuses a sketch that no pattern definition its devices uploaded under ``pattern_id``
    could use, unless ``unchecked``. An https collector is verified by the system's CAs,
    or by ``ca_file`` alone (the private CA that signed its certificate). A ``pattern_id``
    the collector would refuse (:mod:`acep.ids`) is a ``ValueError``, before any request."""
    if not valid_id(pattern_id):
        raise ValueError(f"pattern id {pattern_id!r} must match {ID_RULE} (the ids the "
                         "collector and the agents take)")
    path = "/v1/sketches/" + urllib.parse.quote(pattern_id, safe="")
    query = "?unchecked=1" if unchecked else ""
    status, doc, text = _ask(url, path + query, token, timeout, ca_file, data)
    if status != 200:
        raise RuntimeError(f"the collector refused the sketch: HTTP {status} {text}")
    if doc is None or "etag" not in doc:
        raise RuntimeError(f"{url} did not store the sketch: HTTP 200 {text}"
                           + ("" if doc is None else f" ({NOT_A_COLLECTOR})"))
    return doc


def check_publisher(url: str, token: str, ca_file: str | None = None,
                    timeout: float = CHECK_TIMEOUT) -> dict:
    """Before the job: ``GET /v1/whoami`` with ``token`` must show an acep collector at
    ``url`` that knows the token as an admin's (who may publish); its answer. Else
    :class:`RuntimeError` saying which of these fails."""
    status, doc, text = _ask(url, "/v1/whoami", token, timeout, ca_file)
    if status in (401, 403):
        raise RuntimeError(f"the collector at {url} refuses the token: HTTP {status} {text}")
    if status != 200 or doc is None or "role" not in doc:
        raise RuntimeError(f"{url} is not an acep collector: GET /v1/whoami answered HTTP "
                           f"{status} {text}")
    if doc["role"] != "admin":
        raise RuntimeError(f"the collector at {url} knows the token as "
                           f"{doc.get('device')!r}, a {doc['role']}: publishing takes an "
                           "admin's (acep serve --add-admin NAME)")
    return doc


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer like another, never followed (the token would go along)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


def _ask(url: str, path: str, token: str, timeout: float, ca_file: str | None,
         data: bytes | None = None) -> tuple[int, dict | None, str]:
    """``GET`` (``PUT`` with ``data``) ``url`` + ``path`` with the bearer ``token``: (HTTP
    status, the answer as a JSON object or None, what it says: the collector's ``error``,
    or its first bytes on one line). :class:`RuntimeError` when no answer comes."""
    try:
        context = collector_tls(url, ca_file)
    except ValueError as e:
        raise RuntimeError(str(e)) from None
    headers = {"Authorization": f"Bearer {token}"}
    if data is not None:
        headers["Content-Type"] = "application/octet-stream"
    req = urllib.request.Request(url.rstrip("/") + path, data=data, headers=headers,
                                 method="GET" if data is None else "PUT")
    opener = urllib.request.build_opener(
        _NoRedirects(), *([HTTPSWithinHandler(context=context)] if context else []))
    try:  # the answers are read to a bound: a server that never ends one costs no more
        with opener.open(req, timeout=timeout) as resp:
            status, body = resp.status, resp.read(ANSWER_BYTES)
    except urllib.error.HTTPError as e:
        if 300 <= e.code < 400:
            return e.code, None, (f"a redirect to {one_line(e.headers.get('Location'))[:200]}"
                                  ", not followed (the token would go along)")
        status, body = e.code, _error_body(e)
    except urllib.error.URLError as e:
        raise RuntimeError(f"cannot reach the collector at {url}: {e.reason}") from None
    except (OSError, http.client.HTTPException, ValueError) as e:  # cut short, timed out
        raise RuntimeError(f"no answer from the collector at {url}: "
                           f"{one_line(e) or type(e).__name__}") from None
    doc = _json_object(body)
    return status, doc, _gist(doc, body)


def _error_body(e: urllib.error.HTTPError) -> bytes:
    try:
        return e.read(ANSWER_BYTES)
    except (OSError, http.client.HTTPException):
        return b""
    finally:
        e.close()  # the error holds the connection open


def _json_object(body: bytes) -> dict | None:
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):  # "[[[[..." nests past the decoder's stack
        return None
    return doc if isinstance(doc, dict) else None


def _gist(doc: dict | None, body: bytes) -> str:
    """The collector's ``error`` text, else the answer's first bytes on one line."""
    if doc is not None and "error" in doc:
        return one_line(doc["error"])[:2000]
    text = one_line(body[:200].decode("utf-8", "replace")) or "(an empty answer)"
    return f"{text}{'...' if len(body) > 200 else ''}" + \
        ("" if doc is not None else f" ({NOT_A_COLLECTOR})")
