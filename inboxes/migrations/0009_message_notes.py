from __future__ import annotations

from django.db import migrations, models

# Subjects stored before they were made one line on the way in (inboxes.parsing.one_line_header): the same
# rule in SQL, for the rows that need it. Folded line breaks go (the white space after them stays), then
# every other control character or line break becomes a space.
ONE_LINE_SUBJECTS = r"""
UPDATE {table}
   SET subject = regexp_replace(
       regexp_replace(subject, '\r?\n(?=[ \t])', '', 'g'),
       '\r\n|[\x01-\x1f\x7f-\x9f\u2028\u2029]', ' ', 'g')
 WHERE subject ~ '[\x01-\x1f\x7f-\x9f\u2028\u2029]' {condition};
"""


class Migration(migrations.Migration):
    dependencies = [
        ("inboxes", "0008_invite_next_try"),
    ]

    operations = [
        migrations.AddField(
            model_name="message",
            name="notes",
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.RunSQL(
            ONE_LINE_SUBJECTS.format(table="inboxes_message", condition="AND direction = 'inbound'")
            + ONE_LINE_SUBJECTS.format(table="inboxes_thread", condition=""),
            reverse_sql=migrations.RunSQL.noop,
        ),
    ]
