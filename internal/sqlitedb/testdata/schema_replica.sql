-- user_version 2
CREATE INDEX outcomes_by_time ON outcomes (decided_at);
CREATE INDEX pending_by_key ON pending (model, key, queue_id);
CREATE INDEX records_by_scope_value ON records (scope_value, model) WHERE scope_value <> '';
CREATE TABLE meta (
	name  TEXT PRIMARY KEY,
	value INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE meta_text (
	name  TEXT PRIMARY KEY,
	value TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE outcomes (
	op_id      TEXT PRIMARY KEY,
	model      TEXT NOT NULL,
	key        TEXT NOT NULL,
	status     TEXT NOT NULL,
	version    INTEGER NOT NULL,
	seq        INTEGER NOT NULL,
	reason     TEXT NOT NULL,
	winner     BLOB,
	rebased_as TEXT NOT NULL,
	decided_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE pending (
	queue_id     INTEGER PRIMARY KEY,
	op_id        TEXT NOT NULL UNIQUE,
	model        TEXT NOT NULL,
	key          TEXT NOT NULL,
	op           TEXT NOT NULL,
	value        BLOB,
	base_version INTEGER,
	wall         INTEGER NOT NULL
);
CREATE TABLE records (
	model   TEXT NOT NULL,
	key     TEXT NOT NULL,
	value   BLOB,
	version INTEGER NOT NULL,
	hlc     TEXT NOT NULL,
	wall    INTEGER NOT NULL,
	deleted INTEGER NOT NULL, scope_value TEXT NOT NULL DEFAULT '',
	PRIMARY KEY (model, key)
) WITHOUT ROWID;
