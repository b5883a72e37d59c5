-- PostgreSQL's fixed statements, by name (faststream_sqla/drivers/catalogue.py).
-- {message}, {archive}, ... are our quoted table names; :name are bound parameters.
-- Statements whose shape varies with the call stay Core or code in driver.py.

-- name: first_of_keys
-- The first message of each ordering key: one index descent per key (LIMIT 1 in a
-- lateral subquery); min() grouped by key read every message of each key.
SELECT first.id FROM unnest(CAST(:keys AS text[])) AS k(key) CROSS JOIN LATERAL (SELECT id FROM {message} WHERE queue = :queue AND ordering_key = k.key ORDER BY id LIMIT 1) AS first

-- name: may_vacuum
-- Whether the current user may vacuum the table :name (its owner, the database's
-- owner or a superuser); before PostgreSQL 17, which adds the MAINTAIN privilege.
SELECT current_user, pg_has_role(current_user, c.relowner, 'USAGE') OR pg_has_role(current_user, d.datdba, 'USAGE') OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) FROM pg_class c, pg_database d WHERE c.oid = to_regclass(:name) AND d.datname = current_database()

-- name: may_vacuum_maintain
-- may_vacuum on PostgreSQL 17 and later, where the MAINTAIN privilege also allows it.
SELECT current_user, pg_has_role(current_user, c.relowner, 'USAGE') OR pg_has_role(current_user, d.datdba, 'USAGE') OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) OR has_table_privilege(c.oid, 'MAINTAIN') FROM pg_class c, pg_database d WHERE c.oid = to_regclass(:name) AND d.datname = current_database()

-- name: vacuum_message_table
-- SKIP_LOCKED: another vacuum (autovacuum, another process) is already on it.
-- INDEX_CLEANUP ON: the index entries are the point; left to itself, PostgreSQL skips
-- index cleanup when few heap pages hold dead rows.
-- TRUNCATE OFF: returning empty trailing pages to the OS takes a brief exclusive lock,
-- which would stall claims and publishes; a queue refills those pages anyway.
VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON, TRUNCATE OFF) {message}

-- name: estimated_rows
-- The planner's row estimate of the table :name, as the vacuum just left it: no scan.
SELECT reltuples FROM pg_class WHERE oid = CAST(:name AS regclass)

-- name: oldest_snapshot
-- Other sessions of this database (or walsenders, whose standbys' snapshots hold it
-- back for every database), replication slots and prepared transactions: whatever
-- keeps a vacuum of our table from removing rows, oldest first. Sessions of other
-- roles show their xmin only to a role with pg_read_all_stats (or a superuser);
-- unseen, they make the broker vacuum as if nothing held it back.
SELECT CAST(x AS text), holder FROM (
    SELECT backend_xmin AS x, 'session ' || pid || ' (' || coalesce(state, 'unknown state') || coalesce(', transaction open since ' || to_char(xact_start AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') || ' UTC', '') || coalesce(', application ' || nullif(application_name, ''), '') || ')' AS holder FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND (datname = current_database() OR datname IS NULL) AND backend_xmin IS NOT NULL
    UNION ALL
    SELECT backend_xid, 'session ' || pid || ' (' || coalesce(state, 'unknown state') || coalesce(', transaction open since ' || to_char(xact_start AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') || ' UTC', '') || coalesce(', application ' || nullif(application_name, ''), '') || ')' FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND (datname = current_database() OR datname IS NULL) AND backend_xid IS NOT NULL
    UNION ALL
    SELECT xmin, 'replication slot ' || slot_name FROM pg_replication_slots WHERE xmin IS NOT NULL
    UNION ALL
    SELECT transaction, 'prepared transaction ' || gid FROM pg_prepared_xacts
    WHERE database = current_database()
) AS holders ORDER BY age(x) DESC LIMIT 1

-- name: extend_leases
-- Renews the leases of the (id, token) pairs still claimed by their holder: a row
-- claimed again since (another token) or settled keeps what it has.
UPDATE {message} AS m SET acquired_at = (now() AT TIME ZONE 'UTC') FROM unnest(CAST(:ids AS bigint[]), CAST(:tokens AS int[])) AS o(id, token) WHERE m.id = o.id AND m.claims_count = o.token AND (m.acquired_at IS NOT NULL OR o.id IS NULL)

-- name: table_kind
-- relkind of the table :t ('p' when partitioned); relkind is a "char", which drivers
-- return as bytes or str: compared as text.
SELECT relkind::text FROM pg_class WHERE oid = to_regclass(:t)

-- name: partitions_of
-- The partitions of the table :t, by name (the archive's months and its default).
SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = to_regclass(:t)

-- name: replica_lag
-- A standby's delay behind its primary, in seconds. The age of the last replayed
-- transaction alone would grow while an idle primary writes nothing, so a standby
-- that has replayed all the WAL it received is 0 behind; a primary is 0 behind too.
-- greatest(): the two servers' clocks may differ by a little.
SELECT CASE WHEN NOT pg_is_in_recovery() THEN 0 WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0 ELSE greatest(0, coalesce(extract(epoch FROM now() - pg_last_xact_replay_timestamp()), 0)) END::float8

-- name: bound_read
-- Cancels each later statement of this read's transaction past :ms milliseconds,
-- a lock wait included. Local to the transaction (SET LOCAL): the pooled connection's
-- next user, a write perhaps, is not bound.
SELECT set_config('statement_timeout', :ms, true)
