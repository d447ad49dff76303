"""The ingestion log is append-only, like the audit table: UPDATE is always refused, DELETE unless the
transaction says it is the retention purge or a disconnection (`agentcal.sync_log_purge = 'on'`, see
sync.services)."""

from django.db import migrations

FORWARD = """
CREATE FUNCTION sync_log_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('agentcal.sync_log_purge', true) = 'on' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'the sync ingestion log is append-only (% refused)', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;
CREATE TRIGGER sync_log_append_only
    BEFORE UPDATE OR DELETE ON sync_ingestionrecord
    FOR EACH ROW EXECUTE FUNCTION sync_log_refuse_change();
"""

BACKWARD = """
DROP TRIGGER IF EXISTS sync_log_append_only ON sync_ingestionrecord;
DROP FUNCTION IF EXISTS sync_log_refuse_change();
"""


class Migration(migrations.Migration):
    dependencies = [("sync", "0001_initial")]
    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
