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

-- name: delete_settled
-- Deletes the batch's settled messages (their outcome states 5, 6, 7: COMPLETED,
-- FAILED, EXPIRED, by STATE_CODES), once the archive holds them. The outcome rows
-- drive the join and each finds its message by primary key (STRAIGHT_JOIN, FORCE
-- INDEX): left to itself the optimizer scanned the whole table with locking reads,
-- waiting on every row an open outbox transaction had just inserted.
DELETE m FROM JSON_TABLE(:outcomes, '$[*]' COLUMNS (
    id BIGINT PATH '$[0]', token INT PATH '$[1]', state_code INT PATH '$[2]',
    attempts INT PATH '$[3]', deliveries INT PATH '$[4]',
    first_us BIGINT PATH '$[5]', last_us BIGINT PATH '$[6]',
    next_us BIGINT PATH '$[7]', error LONGTEXT PATH '$[8]')) AS o STRAIGHT_JOIN {message} AS m FORCE INDEX (PRIMARY) ON m.id = o.id AND m.claims_count = o.token AND m.state = 'PROCESSING'
WHERE o.state_code IN (5, 6, 7)

-- name: delete_settled_keyed
-- delete_settled for a batch with keyed messages: their key rows go in the same
-- statement (a multi-table delete costs more than the plain one, so only then).
DELETE m, k FROM JSON_TABLE(:outcomes, '$[*]' COLUMNS (
    id BIGINT PATH '$[0]', token INT PATH '$[1]', state_code INT PATH '$[2]',
    attempts INT PATH '$[3]', deliveries INT PATH '$[4]',
    first_us BIGINT PATH '$[5]', last_us BIGINT PATH '$[6]',
    next_us BIGINT PATH '$[7]', error LONGTEXT PATH '$[8]')) AS o STRAIGHT_JOIN {message} AS m FORCE INDEX (PRIMARY) ON m.id = o.id AND m.claims_count = o.token AND m.state = 'PROCESSING'
LEFT JOIN {keys} AS k ON k.id = m.id
WHERE o.state_code IN (5, 6, 7)

-- name: requeue
-- Puts the batch's messages to try again (outcome states 1, 4: PENDING, RETRYABLE)
-- back, with their counts, times and error; the state code names its state by
-- position in MessageState (ELT). Joined as delete_settled is, for the same reason.
UPDATE JSON_TABLE(:outcomes, '$[*]' COLUMNS (
    id BIGINT PATH '$[0]', token INT PATH '$[1]', state_code INT PATH '$[2]',
    attempts INT PATH '$[3]', deliveries INT PATH '$[4]',
    first_us BIGINT PATH '$[5]', last_us BIGINT PATH '$[6]',
    next_us BIGINT PATH '$[7]', error LONGTEXT PATH '$[8]')) AS o STRAIGHT_JOIN {message} AS m FORCE INDEX (PRIMARY) ON m.id = o.id AND m.claims_count = o.token AND m.state = 'PROCESSING'
SET m.state = ELT(o.state_code, 'PENDING', 'WAITING', 'PROCESSING', 'RETRYABLE', 'COMPLETED', 'FAILED', 'EXPIRED', 'REDRIVEN'), m.attempts_count = o.attempts, m.deliveries_count = o.deliveries,
    m.first_attempt_at = TIMESTAMPADD(MICROSECOND, o.first_us, CAST('1970-01-01' AS DATETIME(6))), m.last_attempt_at = TIMESTAMPADD(MICROSECOND, o.last_us, CAST('1970-01-01' AS DATETIME(6))),
    m.next_attempt_at = COALESCE(TIMESTAMPADD(MICROSECOND, o.next_us, CAST('1970-01-01' AS DATETIME(6))), m.next_attempt_at),
    m.last_error = COALESCE(o.error, m.last_error), m.acquired_at = NULL
WHERE o.state_code IN (1, 4)

-- name: newest_message
-- Where the wake-up watcher starts: the newest id of the queue or its archive (one
-- descent of each primary key), so that the ids of messages settled before it started
-- are not taken for missing ones (new_messages).
SELECT GREATEST(COALESCE((SELECT MAX(id) FROM {message}), 0), COALESCE((SELECT MAX(id) FROM {archive}), 0))

-- name: new_messages
-- The messages newer than the newest the watcher has seen, oldest first: one range of
-- the primary key, a single descent that finds nothing while nothing is new. The third
-- column says whether each may still be claimed: one already claimed needs no
-- wake-up. Run in autocommit, so each look reads what has committed by then.
SELECT id, queue, state IN ('PENDING', 'RETRYABLE') FROM {message} WHERE id > :after ORDER BY id LIMIT :most

-- name: late_and_new_messages
-- new_messages, and the messages of the ids a look found missing below the newest
-- (:missing, a JSON array): an id is handed out at the insert, not at its commit, so
-- a transaction that commits after a later one shows its rows late. Each missing id
-- is found by primary key (STRAIGHT_JOIN, FORCE INDEX), as the outcome writes find
-- theirs.
(SELECT m.id, m.queue, m.state IN ('PENDING', 'RETRYABLE') FROM JSON_TABLE(:missing, '$[*]' COLUMNS (id BIGINT PATH '$')) AS g STRAIGHT_JOIN {message} AS m FORCE INDEX (PRIMARY) ON m.id = g.id)
UNION ALL
(SELECT id, queue, state IN ('PENDING', 'RETRYABLE') FROM {message} WHERE id > :after ORDER BY id LIMIT :most)

-- name: replica_status
-- A replica's state (no row on a server that replicates nothing): Seconds_Behind_Master
-- is how far its SQL thread is behind, NULL while replication is stopped. SHOW SLAVE
-- STATUS, not SHOW REPLICA STATUS: every MariaDB and MySQL version takes it.
SHOW SLAVE STATUS

-- name: bound_read
-- Aborts each later statement of this connection past :seconds (MariaDB's
-- max_statement_time, lock waits included) with error 1969. A session setting, so the
-- read sets it back (unbound_read) before the pooled connection serves anyone else.
SET SESSION max_statement_time = :seconds

-- name: unbound_read
-- Ends bound_read's bound: the server's default again, before the connection goes back
-- to the pool.
SET SESSION max_statement_time = DEFAULT
