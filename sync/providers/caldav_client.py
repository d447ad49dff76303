"""A CalDAV client for one calendar collection: the connection check, RFC 6578 incremental sync, the
ctag/etag fallback for servers without it, calendar-multiget, and conditional writes.

Plain httpx rather than the `caldav` library: the sync engine decides what to do from the exact status,
precondition and Retry-After of every answer, and sends exactly the conditional headers it means to.
"""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from urllib.parse import quote, unquote, urlsplit
from xml.sax.saxutils import escape

import httpx

from agentcal.retry_after import retry_after_seconds
from sync.providers.client_base import UpstreamClient
from sync.providers.errors import (
    AuthFailed,
    NotACalendar,
    PreconditionFailed,
    SyncTokenRefused,
    Unavailable,
    UpstreamError,
)

DAV = "{DAV:}"
CALDAV = "{urn:ietf:params:xml:ns:caldav}"
CALSERVER = "{http://calendarserver.org/ns/}"
XML_CONTENT_TYPE = "application/xml; charset=utf-8"
MAX_RESPONSE_BYTES = 50 * 1024 * 1024  # a whole large calendar in one multistatus fits; a hostile stream not
MULTIGET_CHUNK = 100
MAX_SYNC_ROUNDS = 1000  # truncated sync answers are followed this many times before giving up
# The timeout bounds each read, not the answer: a server trickling a byte at a time (the person connecting
# chooses it) would otherwise hold a worker for as long as MAX_RESPONSE_BYTES takes to trickle.
MAX_EXCHANGE_SECONDS = 120.0

_HEAD = '<?xml version="1.0" encoding="utf-8"?>'
_NS = 'xmlns:D="DAV:" xmlns:C="urn:ietf:params:xml:ns:caldav" xmlns:CS="http://calendarserver.org/ns/"'
_DATA_PROPS = "<D:prop><D:getetag/><C:calendar-data/></D:prop>"
_PROPFIND = f"{_HEAD}<D:propfind {_NS}><D:prop>{{}}</D:prop></D:propfind>"
_SYNC = (
    f"{_HEAD}<D:sync-collection {_NS}><D:sync-token>{{}}</D:sync-token><D:sync-level>1</D:sync-level>"
    f"{_DATA_PROPS}</D:sync-collection>"
)
_MULTIGET = f"{_HEAD}<C:calendar-multiget {_NS}>{_DATA_PROPS}{{}}</C:calendar-multiget>"


@dataclass(frozen=True)
class CalendarInfo:
    display_name: str | None
    supports_sync: bool
    ctag: str | None
    sync_token: str | None


@dataclass(frozen=True)
class Resource:
    href: str
    etag: str | None
    data: str


@dataclass(frozen=True)
class Delta:
    changed: list[Resource]
    deleted: list[str]
    sync_token: str


class _NoDoctype(ET.TreeBuilder):
    def doctype(self, name: str, pubid: str, system: str) -> None:
        # Entities live in the DTD: refusing it refuses entity-expansion bombs before any expansion.
        raise UpstreamError("response refused: it declares a DOCTYPE")


def _parse_xml(body: bytes, during: str) -> ET.Element:
    parser = ET.XMLParser(target=_NoDoctype())
    try:
        parser.feed(body)
        return parser.close()
    except ET.ParseError as exc:
        raise UpstreamError(f"{during}: malformed XML in response: {exc}") from exc


def _status_of(element: ET.Element) -> int | None:
    """The code of a `<D:status>HTTP/1.1 404 Not Found</D:status>` child, None if absent or garbled."""
    parts = (element.findtext(f"{DAV}status") or "").split()
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None


def _ok_props(response: ET.Element) -> dict[str, ET.Element]:
    props: dict[str, ET.Element] = {}
    for propstat in response.findall(f"{DAV}propstat"):
        status = _status_of(propstat)
        prop = propstat.find(f"{DAV}prop")
        if status is not None and 200 <= status < 300 and prop is not None:
            props.update((child.tag, child) for child in prop)
    return props


def _text(props: dict[str, ET.Element], tag: str) -> str | None:
    return props[tag].text if tag in props else None


def _href_of(response: ET.Element) -> str:
    return _href_path(response.findtext(f"{DAV}href") or "")


def _resource(response: ET.Element) -> Resource | None:
    """The member a multistatus response describes, None when it came without calendar data."""
    props = _ok_props(response)
    data = _text(props, f"{CALDAV}calendar-data")
    return None if data is None else Resource(_href_of(response), _text(props, f"{DAV}getetag"), data)


def _href_path(href: str) -> str:
    """Servers may answer with full URLs or percent-encoded paths: compare and return decoded paths."""
    return unquote(urlsplit(href.strip()).path)


def _precondition(body: bytes) -> str | None:
    """The local name of the precondition in a `<D:error>` body (`valid-sync-token`), if there is one."""
    if not body.lstrip().startswith(b"<"):
        return None
    try:
        root = _parse_xml(body, "error body")
    except UpstreamError:
        return None
    return root[0].tag.rpartition("}")[2] if root.tag == f"{DAV}error" and len(root) else None


class CalDAVClient(UpstreamClient):
    def __init__(
        self,
        url: str,
        username: str,
        password: str,
        *,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        parts = urlsplit(url)
        if parts.username or parts.password:
            raise ValueError("pass credentials as username and password, not inside the URL")
        self.url = url if url.endswith("/") else url + "/"
        self._path = _href_path(self.url).rstrip("/")
        self._password = password
        # BasicAuth is sent preemptively; redirects are never followed: a calendar that moved must be
        # reconfigured on purpose, not followed with our credentials to wherever it points.
        self._http = httpx.Client(
            auth=httpx.BasicAuth(username, password),
            timeout=timeout,
            transport=transport,
            follow_redirects=False,
            headers={"User-Agent": "AgentCal"},
            # Proxy settings from the environment would choose the address instead of the caller's
            # transport (which pins the address it checked: sync.providers.caldav.open_caldav).
            trust_env=False,
        )

    def close(self) -> None:
        self._http.close()

    def resource_url(self, name: str) -> str:
        if not name or "/" in name or name in {".", ".."}:
            raise ValueError(f"not a resource name: {name!r}")
        return self.url + quote(name, safe="")

    def check(self) -> CalendarInfo:
        props = self._own_props(
            "<D:resourcetype/><D:displayname/><CS:getctag/><D:sync-token/><D:supported-report-set/>", "check"
        )
        resourcetype = props.get(f"{DAV}resourcetype")
        if resourcetype is None or resourcetype.find(f"{CALDAV}calendar") is None:
            raise NotACalendar(f"check {self.url}: this URL is not a calendar collection")
        reports = props.get(f"{DAV}supported-report-set")
        sync_token = _text(props, f"{DAV}sync-token")
        # Without a supported-report-set to read, a sync-token (mandatory with RFC 6578) is the tell.
        supports_sync = (
            reports.find(f".//{DAV}sync-collection") is not None if reports is not None else bool(sync_token)
        )
        ctag = _text(props, f"{CALSERVER}getctag")
        return CalendarInfo(_text(props, f"{DAV}displayname"), supports_sync, ctag, sync_token)

    def ctag(self) -> str | None:
        return _text(self._own_props("<CS:getctag/>", "ctag"), f"{CALSERVER}getctag")

    def sync(self, token: str | None) -> Delta:
        """Changes since `token` (everything when None). Follows truncated answers to the end. A refused
        token raises SyncTokenRefused, never a full listing in disguise: a listing has no deletions."""
        latest: dict[str, Resource | None] = {}  # href → its state; None: deleted; later rounds win
        current = token
        for _ in range(MAX_SYNC_ROUNDS):
            root = self._xml(
                "REPORT", self.url, _SYNC.format(escape(current or "")), "0", "sync", sent_token=bool(current)
            )
            truncated, without_data = False, []
            for response in root.findall(f"{DAV}response"):
                href, status, resource = _href_of(response), _status_of(response), _resource(response)
                if href.rstrip("/") == self._path:
                    truncated = truncated or status == 507  # RFC 6578 §3.6: more changes to collect
                elif status in (404, 410):
                    latest[href] = None
                elif resource is None:
                    without_data.append(href)
                else:
                    latest[href] = resource
            fetched = {resource.href: resource for resource in self.fetch(without_data)}
            latest.update((href, fetched.get(href)) for href in without_data)  # gone in between: deleted
            new_token = (root.findtext(f"{DAV}sync-token") or "").strip()
            if not new_token:
                raise UpstreamError(f"sync {self.url}: the answer carries no sync-token")
            if not truncated:
                changed = [resource for resource in latest.values() if resource is not None]
                deleted = [href for href, resource in latest.items() if resource is None]
                return Delta(changed, deleted, new_token)
            if new_token == current:
                raise UpstreamError(f"sync {self.url}: truncated answer without progress")
            current = new_token
        raise UpstreamError(f"sync {self.url}: still truncated after {MAX_SYNC_ROUNDS} rounds")

    def etags(self) -> dict[str, str]:
        root = self._xml(
            "PROPFIND", self.url, _PROPFIND.format("<D:resourcetype/><D:getetag/>"), "1", "etags"
        )
        etags: dict[str, str] = {}
        for response in root.findall(f"{DAV}response"):
            href, props = _href_of(response), _ok_props(response)
            resourcetype = props.get(f"{DAV}resourcetype")
            is_collection = resourcetype is not None and resourcetype.find(f"{DAV}collection") is not None
            etag = _text(props, f"{DAV}getetag")
            if href.rstrip("/") != self._path and not is_collection and etag:
                etags[href] = etag
        return etags

    def fetch(self, hrefs: list[str]) -> list[Resource]:
        """The named members with their data; members that no longer exist are left out."""
        resources: list[Resource] = []
        for start in range(0, len(hrefs), MULTIGET_CHUNK):
            chunk = "".join(
                f"<D:href>{escape(quote(href))}</D:href>" for href in hrefs[start : start + MULTIGET_CHUNK]
            )
            root = self._xml("REPORT", self.url, _MULTIGET.format(chunk), None, "fetch")
            found = (_resource(response) for response in root.findall(f"{DAV}response"))
            resources.extend(resource for resource in found if resource is not None)
        return resources

    def put(
        self, name: str, ics: str, *, create_only: bool = False, if_match: str | None = None
    ) -> str | None:
        """Writes the resource; returns its new ETag when the server sends one (not all do)."""
        if create_only and if_match:
            raise ValueError("create_only and if_match exclude each other")
        headers = {"Content-Type": "text/calendar; charset=utf-8"}
        if create_only:
            headers["If-None-Match"] = "*"
        if if_match:
            headers["If-Match"] = if_match
        response, body = self._send("PUT", self.resource_url(name), "put", headers, ics.encode())
        self._raise_for(response, body, during="put")
        return response.headers.get("ETag")

    def delete(self, name: str, *, if_match: str | None = None) -> bool:
        """True if this call deleted the resource, False if it was already gone."""
        headers = {"If-Match": if_match} if if_match else {}
        response, body = self._send("DELETE", self.resource_url(name), "delete", headers, None)
        if response.status_code in (404, 410):
            return False
        self._raise_for(response, body, during="delete")
        return True

    def _own_props(self, props: str, during: str) -> dict[str, ET.Element]:
        root = self._xml("PROPFIND", self.url, _PROPFIND.format(props), "0", during)
        responses = root.findall(f"{DAV}response")
        own = [response for response in responses if _href_of(response).rstrip("/") == self._path]
        if not (own or responses):
            raise UpstreamError(f"{during} {self.url}: empty multistatus")
        return _ok_props((own or responses)[0])

    def _xml(
        self, method: str, url: str, body: str, depth: str | None, during: str, *, sent_token: bool = False
    ) -> ET.Element:
        headers = {"Content-Type": XML_CONTENT_TYPE} | ({"Depth": depth} if depth else {})
        response, content = self._send(method, url, during, headers, body.encode())
        self._raise_for(response, content, during=during, sent_token=sent_token)
        if response.status_code != 207:
            raise UpstreamError(f"{during} {url}: expected 207 Multi-Status, got {response.status_code}")
        return _parse_xml(content, during)

    def _send(
        self, method: str, url: str, during: str, headers: dict[str, str], content: bytes | None
    ) -> tuple[httpx.Response, bytes]:
        deadline = time.monotonic() + MAX_EXCHANGE_SECONDS
        try:
            with self._http.stream(method, url, headers=headers, content=content) as response:
                body = bytearray()
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > MAX_RESPONSE_BYTES:
                        raise UpstreamError(
                            self._redact(f"{during} {url}: response over {MAX_RESPONSE_BYTES} bytes")
                        )
                    if time.monotonic() > deadline:
                        raise Unavailable(
                            self._redact(
                                f"{during} {url}: answer not complete after {MAX_EXCHANGE_SECONDS:g} s"
                            )
                        )
        except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as exc:
            raise Unavailable(self._redact(f"{during} {url}: {type(exc).__name__}: {exc}")) from exc
        except httpx.HTTPError as exc:
            raise UpstreamError(self._redact(f"{during} {url}: {type(exc).__name__}: {exc}")) from exc
        return response, bytes(body)

    def _raise_for(
        self, response: httpx.Response, body: bytes, *, during: str, sent_token: bool = False
    ) -> None:
        """The one mapping from an answer to an error; returns quietly on 2xx.

        403 means different things by operation: a refused account on reads, a read-only calendar on
        writes (retrying with other credentials would not help), and on a sync REPORT with a token the way
        servers refuse the token (Radicale answers 403 with DAV:valid-sync-token)."""
        status = response.status_code
        if 200 <= status < 300:
            return
        precondition = _precondition(body) if status >= 400 else None
        message = self._redact(
            f"{during} {response.request.url}: HTTP {status} {response.reason_phrase}"
            + (f" ({precondition})" if precondition else "")
            + (f" → {response.headers.get('Location')}" if 300 <= status < 400 else "")
        )
        error: type[UpstreamError] = UpstreamError
        if precondition == "valid-sync-token" or (
            during == "sync" and sent_token and status in (403, 409, 412) and precondition is None
        ):
            error = SyncTokenRefused
        elif status == 401 or (status == 403 and precondition is None and during not in ("put", "delete")):
            error = AuthFailed
        elif status in (404, 410):
            error = NotACalendar
        elif status == 412:
            error = PreconditionFailed
        elif status in (408, 429) or status >= 500:
            raise Unavailable(
                message, status=status, retry_after=retry_after_seconds(response.headers.get("Retry-After"))
            )
        raise error(message, status=status)

    def _redact(self, message: str) -> str:
        return message.replace(self._password, "***") if self._password else message
