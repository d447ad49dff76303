"""Upstream calendar providers: CalDAV, Google Calendar, Microsoft 365.

`registry.provider_for` picks a connection's provider; `base` holds what every provider shares (the
fetch tail, the interface), `oauth` the base of the OAuth providers, `errors` the one upstream error
type. Each provider's plain-httpx client is its `*_client` module.
"""
