-- SQLite's fixed statements, by name (faststream_sqla/drivers/catalogue.py).
-- {message}, {archive}, ... are our quoted table names. Statements run on the sqlite3
-- cursor itself (on the driver's thread) take ? parameters, in order.
-- Statements whose shape varies with the call, or that are built from the table's
-- columns, stay Core or code in driver.py.

-- name: busy_timeout
-- How long a connection waits for another connection's write lock before it fails
-- with SQLITE_BUSY.
PRAGMA busy_timeout = 30000

-- name: journal_mode_wal
-- Readers never wait for a writer, nor a writer for readers.
PRAGMA journal_mode = WAL

-- name: foreign_keys
-- SQLite enforces foreign keys only when asked, per connection.
PRAGMA foreign_keys = ON

-- name: begin_read
-- A reader's transaction takes no lock up front: the connect probe, the schema
-- check, ping and the backpressure probe never wait for a writer.
BEGIN

-- name: begin_write
-- A writer takes the write lock at once: a deferred transaction that later writes
-- fails at once with SQLITE_BUSY instead of waiting on busy_timeout.
BEGIN IMMEDIATE

-- name: commit
-- Ends a transaction begun on the cursor itself (immediate_transaction).
COMMIT

-- name: rollback
-- Undoes a failed transaction begun on the cursor itself (immediate_transaction).
ROLLBACK

-- name: extend_leases
-- Renews the leases of the (id, token) pairs still claimed by their holder, the pairs
-- as one JSON document (?): a row claimed again since (another token) or settled
-- keeps what it has. The time is the stored text form, microseconds included.
UPDATE {message} AS m SET acquired_at = (strftime('%Y-%m-%d %H:%M:%f', 'now') || '000') FROM json_each(?) AS o WHERE m.id = json_extract(o.value, '$[0]') AND m.claims_count = json_extract(o.value, '$[1]') AND m.state = 'PROCESSING'

-- name: requeue
-- Puts one message to try again back, with its counts, times and error, if its
-- holder (the token) still has it: run once per requeued outcome (executemany).
UPDATE {message} SET state = ?, attempts_count = ?, deliveries_count = ?, first_attempt_at = ?, last_attempt_at = ?, next_attempt_at = COALESCE(?, next_attempt_at), last_error = COALESCE(?, last_error), acquired_at = NULL WHERE id = ? AND claims_count = ? AND state = 'PROCESSING'
