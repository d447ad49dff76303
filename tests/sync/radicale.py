"""Real CalDAV peers for the sync tests: a Radicale server in a subprocess, a person editing a calendar
on it as their phone app would (raw HTTP, not our client), and a proxy that answers in Radicale's place
when a test asks it to (429, 503, Retry-After…) and relays everything else.
"""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

import httpx

DEFAULT_USER = "alice"
DEFAULT_PASSWORD = "alice-app-password"
STARTUP_TIMEOUT = 10.0
XML = {"Content-Type": "application/xml; charset=utf-8"}


@dataclass(frozen=True)
class CalDAVAccount:
    url: str
    username: str
    password: str


def ics_event(uid: str, *, summary: str = "Dentist", start: datetime | None = None, minutes: int = 30) -> str:
    """A one-event VCALENDAR, the kind a phone app writes."""
    start = (start or datetime(2030, 1, 7, 9, 0, tzinfo=UTC)).astimezone(UTC)
    end = start + timedelta(minutes=minutes)
    stamp = "%Y%m%dT%H%M%SZ"
    return (
        "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//Phone//Calendar//EN\r\nBEGIN:VEVENT\r\n"
        f"UID:{uid}\r\nDTSTAMP:20300101T000000Z\r\nDTSTART:{start:{stamp}}\r\nDTEND:{end:{stamp}}\r\n"
        f"SUMMARY:{summary}\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"
    )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class RadicaleServer:
    """`python -m radicale` on a free 127.0.0.1 port with its own storage and plain-text htpasswd file.

    Radicale re-reads the htpasswd file on every login (its cache is off by default), so users added
    while it runs can sign in at once; a wrong password gets a real 401."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.log_path = folder / "radicale.log"
        self._htpasswd = folder / "users"
        self._users: dict[str, str] = {DEFAULT_USER: DEFAULT_PASSWORD}
        self._users_lock = threading.Lock()
        self._names = itertools.count(1)
        self._process: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self) -> None:
        self._write_users()
        for _attempt in range(3):  # another process may take the free port between probe and bind
            port = _free_port()
            if self._launch(port):
                self.url = f"http://127.0.0.1:{port}"
                return
        raise RuntimeError(
            f"Radicale did not start; see {self.log_path}:\n{self.log_path.read_text()[-2000:]}"
        )

    def _launch(self, port: int) -> bool:
        command = [
            sys.executable, "-m", "radicale",
            "--config", "",  # no /etc/radicale/config or ~/.config/radicale/config
            "--server-hosts", f"127.0.0.1:{port}",
            "--auth-type", "htpasswd",
            "--auth-htpasswd-filename", str(self._htpasswd),
            "--auth-htpasswd-encryption", "plain",
            "--auth-delay", "0",  # the default second of delay after a 401/403 is for brute force, not tests
            "--server-delay-on-error", "0",
            "--rights-type", "owner_only",
            "--storage-filesystem-folder", str(self.folder / "collections"),
        ]  # fmt: skip
        # A log file, not a pipe: nobody reads a pipe during the session, and a full one blocks Radicale.
        with self.log_path.open("ab") as log:
            logged_before = log.tell()
            self._process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        # Ready is what this process logs once its socket listens. Probing the port instead could reach
        # another worker's server that took the port first, while this one fails to bind and exits.
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                return False
            with self.log_path.open("rb") as log:
                log.seek(logged_before)
                if b"Radicale server ready" in log.read():
                    return True
            time.sleep(0.02)
        self.stop()
        return False

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None

    def add_user(self, user: str, password: str) -> None:
        with self._users_lock:
            self._users[user] = password
            self._write_users()

    def _write_users(self) -> None:
        staged = self._htpasswd.with_suffix(".new")
        staged.write_text("".join(f"{user}:{password}\n" for user, password in self._users.items()))
        os.replace(staged, self._htpasswd)  # Radicale never reads half a file

    def new_calendar(self, user: str = DEFAULT_USER, password: str = DEFAULT_PASSWORD) -> str:
        """A fresh, empty calendar collection of `user` (added if unknown); returns its URL."""
        with self._users_lock:
            known = user in self._users
        if not known:
            self.add_user(user, password)
        url = f"{self.url}/{quote(user)}/calendar-{os.getpid()}-{next(self._names)}/"
        response = httpx.request("MKCALENDAR", url, auth=(user, password))
        if response.status_code != 201:
            raise RuntimeError(f"MKCALENDAR {url}: {response.status_code} {response.text[:200]}")
        return url


class Human:
    """Someone using their phone's calendar app on the same calendar: plain HTTP, not AgentCal's client."""

    def __init__(self, account: CalDAVAccount) -> None:
        self.url = account.url
        self._http = httpx.Client(auth=(account.username, account.password), timeout=10)

    def close(self) -> None:
        self._http.close()

    def put(self, name: str, ics: str) -> None:
        response = self._http.put(
            self.url + quote(name), content=ics, headers={"Content-Type": "text/calendar; charset=utf-8"}
        )
        response.raise_for_status()

    def delete(self, name: str) -> None:
        self._http.delete(self.url + quote(name)).raise_for_status()

    def get(self, name: str) -> str | None:
        response = self._http.get(self.url + quote(name))
        if response.status_code == 404:
            return None
        response.raise_for_status()
        return response.text

    def list(self) -> dict[str, str]:
        """Every event in the calendar by resource name, as stored (one calendar-query REPORT)."""
        query = (
            '<?xml version="1.0" encoding="utf-8"?>'
            '<C:calendar-query xmlns:D="DAV:" xmlns:C="urn:ietf:params:xml:ns:caldav">'
            "<D:prop><C:calendar-data/></D:prop>"
            '<C:filter><C:comp-filter name="VCALENDAR"/></C:filter></C:calendar-query>'
        )
        response = self._http.request("REPORT", self.url, content=query, headers={**XML, "Depth": "1"})
        response.raise_for_status()
        events: dict[str, str] = {}
        for item in ET.fromstring(response.content).iter("{DAV:}response"):
            href = unquote(item.findtext("{DAV:}href") or "")
            data = item.findtext(".//{urn:ietf:params:xml:ns:caldav}calendar-data")
            if data is not None:
                events[href.rsplit("/", 1)[-1]] = data
        return events


@dataclass
class _Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    methods: set[str] | None
    remaining: int


class FaultyProxy:
    """An HTTP proxy in front of Radicale that relays every request unless a queued answer matches it;
    queued answers never reach Radicale. Counts every request it receives by method."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self._answers: list[_Answer] = []
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._http = httpx.Client(timeout=10)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        # A short poll: shutdown() waits for the loop to notice, half a second per test by default.
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True)
        self._thread.start()

    def through(self, url: str) -> str:
        """`url` on the upstream server, reached through this proxy."""
        parts = urlsplit(url)
        return self.url + parts.path + (f"?{parts.query}" if parts.query else "")

    def fail_next(
        self,
        status: int,
        *,
        times: int = 1,
        retry_after: str | None = None,
        methods: set[str] | None = None,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
    ) -> None:
        """Answer the next `times` requests (of `methods`, or any) with `status` instead of relaying."""
        answer_headers = dict(headers or {})
        if retry_after is not None:
            answer_headers["Retry-After"] = retry_after
        with self._lock:
            self._answers.append(_Answer(status, answer_headers, body, methods, times))

    def count(self, method: str) -> int:
        with self._lock:
            return self._counts[method.upper()]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._http.close()

    def _take_answer(self, method: str) -> _Answer | None:
        with self._lock:
            self._counts[method] += 1
            for answer in self._answers:
                if answer.methods is None or method in answer.methods:
                    answer.remaining -= 1
                    if answer.remaining <= 0:
                        self._answers.remove(answer)
                    return answer
        return None

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        proxy = self
        # Per-connection headers stay on their hop; httpx hands the body over decoded and whole; the
        # handler writes its own Server and Date.
        not_relayed = {"host", "connection", "keep-alive", "transfer-encoding", "content-length"}
        not_relayed |= {"content-encoding", "server", "date"}

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def relay(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                answer = proxy._take_answer(self.command)
                if answer is not None:
                    status, headers, content = answer.status, list(answer.headers.items()), answer.body
                else:
                    forwarded = {k: v for k, v in self.headers.items() if k.lower() not in not_relayed}
                    try:
                        response = proxy._http.request(
                            self.command, proxy.upstream + self.path, headers=forwarded, content=body
                        )
                    except httpx.TransportError as exc:  # what a real reverse proxy answers
                        status, headers, content = 502, [], f"upstream: {exc}".encode()
                    else:
                        status, content = response.status_code, response.content
                        headers = [
                            (k, v) for k, v in response.headers.multi_items() if k.lower() not in not_relayed
                        ]
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(content)

            def log_message(self, format: str, *args: object) -> None:
                pass  # the test output is no place for an access log

        for method in ("GET", "HEAD", "PUT", "DELETE", "POST", "OPTIONS", "PROPFIND", "PROPPATCH", "REPORT",
                       "MKCALENDAR", "MKCOL", "MOVE", "COPY"):  # fmt: skip
            setattr(Handler, f"do_{method}", Handler.relay)
        return Handler
