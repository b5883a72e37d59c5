-- MySQL and MariaDB's fixed statements, by name (faststream_sqla/drivers/catalogue.py).
-- {message}, {archive}, ... are our quoted table names; :name are bound parameters.
-- Statements whose shape varies with the call, or that are built from the table's
-- columns and the message states, stay Core or code in driver.py.

-- name: server_settings
-- The largest statement the server takes (a batch of inserts is split below it) and
-- how it hands out auto-increment ids (whether a multi-row INSERT's ids are
-- consecutive from LAST_INSERT_ID()).
SELECT @@max_allowed_packet, @@innodb_autoinc_lock_mode

-- name: last_insert_id
-- The first id of the multi-row INSERT just run, where the server cannot return the
-- ids (MySQL 8, or a role that may not read the table).
SELECT LAST_INSERT_ID()

-- name: extend_leases
-- Renews the leases of the (id, token) pairs still claimed by their holder. The lease
-- rows drive the join and each finds its message by primary key (STRAIGHT_JOIN, FORCE
-- INDEX): JSON_TABLE as a join source has no Core construct.
UPDATE JSON_TABLE(:leases, '$[*]' COLUMNS (id BIGINT PATH '$[0]', token INT PATH '$[1]')) AS o STRAIGHT_JOIN {message} AS m FORCE INDEX (PRIMARY) ON m.id = o.id AND m.claims_count = o.token AND m.state = 'PROCESSING' SET m.acquired_at = UTC_TIMESTAMP(6)
