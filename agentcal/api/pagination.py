"""The query parameters of the API's list endpoints (agentcal.pagination pages through them)."""

from __future__ import annotations

from rest_framework import serializers

from agentcal.pagination import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE


class PageQuery(serializers.Serializer):
    """The query parameters every list endpoint takes; a listing's own filters extend it."""

    cursor = serializers.CharField(
        required=False, max_length=1024, help_text="The `next_cursor` of the previous page."
    )
    limit = serializers.IntegerField(
        required=False, min_value=1, max_value=MAX_PAGE_SIZE, default=DEFAULT_PAGE_SIZE
    )
