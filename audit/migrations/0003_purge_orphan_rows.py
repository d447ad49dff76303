"""Rows with no workspace (refused requests with unknown keys) get a fixed 90-day retention.

Replaces the trigger function of 0002: before, such rows could never be purged (the purge joined on
workspaces) yet the trigger treated their retention as zero days.
"""

from django.db import migrations

FORWARD = """
CREATE OR REPLACE FUNCTION audit_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    retention_days integer;
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('agentcal.audit_purge', true) = 'on' THEN
        SELECT audit_retention_days INTO retention_days
          FROM workspaces_workspace WHERE id = OLD.workspace_id;
        IF OLD.timestamp < now() - make_interval(days => COALESCE(retention_days, 90)) THEN
            RETURN OLD;
        END IF;
    END IF;
    RAISE EXCEPTION 'audit records are append-only (% refused)', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;
"""

BACKWARD = FORWARD.replace("COALESCE(retention_days, 90)", "COALESCE(retention_days, 0)")


class Migration(migrations.Migration):
    dependencies = [("audit", "0002_append_only")]
    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
