"""Attachments of agents' mail: stored through Django's storage API, served only as downloads.

The files live in the default storage (MEDIA_ROOT on disk unless STORAGES names another backend, e.g. an
object store), under names made from the attachment's id alone — never the sender's filename, which is
only ever a download name. Nothing serves the storage directly: every download goes through a view that
checked who is asking (the agent API, the dashboard), and comes out here, as an attachment of a type
no browser renders as a page of ours.
"""

from __future__ import annotations

from functools import partial

from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import transaction
from django.db.models.signals import post_delete
from django.http import HttpResponse
from django.utils.http import content_disposition_header

from inboxes.models import Attachment, Message
from inboxes.parsing import ParsedAttachment

# Types sent as themselves (still as downloads); anything else is application/octet-stream, so no browser
# renders, sniffs or runs what a stranger sent.
SAFE_ATTACHMENT_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp", "application/pdf"})
# A download never runs as a page of our origin, even if a browser decided to render it.
DOWNLOAD_POLICY = "default-src 'none'; sandbox"


def attachments_store(message: Message, parsed: list[ParsedAttachment]) -> list[Attachment]:
    """Write the message's attachments to storage and record them, inside the delivering transaction.
    Files are written first: a row never names a missing file. Should the transaction roll back (rare: the
    parse is retried), the files stay behind unreferenced under their random names."""
    rows = []
    for part in parsed:
        row = Attachment(
            message=message,
            filename=part.filename,
            content_type=part.content_type,
            size=part.size,
            skipped=part.skipped,
        )
        if part.content is not None:
            name = default_storage.save(f"inbox-attachments/{row.public_id}", ContentFile(part.content))
            row.file.name = name
        rows.append(row)
    return Attachment.objects.bulk_create(rows)


def attachment_response(attachment: Attachment) -> HttpResponse:
    """The attachment as a download: the sender's filename, a type that cannot be rendered or sniffed.
    (Read whole: attachments are capped at INBOUND_MAX_ATTACHMENT_BYTES.)"""
    content_type = attachment.content_type.lower()
    if content_type not in SAFE_ATTACHMENT_TYPES:
        content_type = "application/octet-stream"
    with attachment.file.open("rb") as stored:
        content = stored.read()
    # The sender's name as they wrote it stays on the attachment; the download is offered under its last
    # part only, so a name like "../../.bashrc" cannot steer a client that saves by it into a folder.
    offered = attachment.filename.replace("\\", "/").rsplit("/", 1)[-1].strip(". ")
    return download_response(content, content_type=content_type, filename=offered or attachment.public_id)


def download_response(content: bytes, *, content_type: str, filename: str) -> HttpResponse:
    """Bytes from a stranger's mail as a download (an attachment, a raw message): never rendered or
    sniffed as a page of ours."""
    response = HttpResponse(content, content_type=content_type)
    response["Content-Disposition"] = content_disposition_header(as_attachment=True, filename=filename)
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = DOWNLOAD_POLICY
    return response


def _delete_file(sender: type[Attachment], instance: Attachment, **kwargs: object) -> None:
    if instance.file.name:
        transaction.on_commit(partial(default_storage.delete, instance.file.name))


def connect_signals() -> None:
    # An attachment row deleted (its agent, its workspace) takes its file along, once that commits.
    post_delete.connect(_delete_file, sender=Attachment, dispatch_uid="inboxes.attachment_file")
