"""Make the audit table append-only in the database itself.

UPDATE is always refused. DELETE is refused unless the retention purge asks for it (the transaction
sets `agentcal.audit_purge = 'on'`, see audit.services.audit_purge_expired) AND the row is already
past its workspace's retention window, so even a caller that sets the flag cannot erase recent history.
"""

from django.db import migrations

FORWARD = """
CREATE FUNCTION audit_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    retention_days integer;
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('agentcal.audit_purge', true) = 'on' THEN
        SELECT audit_retention_days INTO retention_days
          FROM workspaces_workspace WHERE id = OLD.workspace_id;
        IF OLD.timestamp < now() - make_interval(days => COALESCE(retention_days, 0)) THEN
            RETURN OLD;
        END IF;
    END IF;
    RAISE EXCEPTION 'audit records are append-only (% refused)', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;

CREATE TRIGGER audit_append_only
    BEFORE UPDATE OR DELETE ON audit_auditrecord
    FOR EACH ROW EXECUTE FUNCTION audit_refuse_change();
"""

BACKWARD = """
DROP TRIGGER IF EXISTS audit_append_only ON audit_auditrecord;
DROP FUNCTION IF EXISTS audit_refuse_change();
"""


class Migration(migrations.Migration):
    dependencies = [("audit", "0001_initial"), ("workspaces", "0001_initial")]
    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
