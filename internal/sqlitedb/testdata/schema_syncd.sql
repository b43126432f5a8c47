-- user_version 4
CREATE INDEX conflicts_tenant_id ON conflicts (tenant, id);
CREATE INDEX ledger_decisions_by_decided_at
		ON ledger_decisions (scope, decided_at);
CREATE INDEX oplog_tenant_seq ON oplog (tenant, seq);
CREATE INDEX oplog_tenants_by_entries ON oplog_tenants (entries);
CREATE INDEX oplog_tenants_by_floor ON oplog_tenants (floor);
CREATE INDEX records_member ON records (tenant, member, model) WHERE member IS NOT NULL;
CREATE INDEX records_scope ON records (tenant, scope_value, model, key) WHERE scope_value IS NOT NULL;
CREATE INDEX requested_sets_age ON requested_sets (tenant, set_at, client_id);
CREATE TABLE conflicts (
	id             INTEGER PRIMARY KEY AUTOINCREMENT,
	tenant         TEXT    NOT NULL,
	model          TEXT    NOT NULL,
	key            TEXT    NOT NULL,
	policy         TEXT    NOT NULL,
	reason         TEXT    NOT NULL,
	loser_op_id    TEXT    NOT NULL,
	loser_version  INTEGER NOT NULL,
	loser_value    BLOB,
	loser_hlc      TEXT    NOT NULL,
	loser_deleted  INTEGER NOT NULL,
	winner_op_id   TEXT    NOT NULL,
	winner_version INTEGER NOT NULL,
	winner_value   BLOB,
	winner_hlc     TEXT    NOT NULL,
	winner_deleted INTEGER NOT NULL,
	decided_at     INTEGER NOT NULL
);
CREATE TABLE ledger_decisions (
		scope      TEXT    NOT NULL,
		op_id      TEXT    NOT NULL,
		op_time    INTEGER NOT NULL,
		digest     BLOB    NOT NULL,
		result     BLOB    NOT NULL,
		decided_at INTEGER NOT NULL,
		PRIMARY KEY (scope, op_id)
	);
CREATE TABLE ledger_meta (
		id         INTEGER PRIMARY KEY CHECK (id = 1),
		floor_ms   INTEGER,
		counted_ms INTEGER NOT NULL DEFAULT -9223372036854775808
	);
CREATE TABLE ledger_scopes (
		scope    TEXT    NOT NULL PRIMARY KEY,
		entries  INTEGER NOT NULL,
		floor_ms INTEGER
	) WITHOUT ROWID;
CREATE TABLE oplog (
		seq        INTEGER PRIMARY KEY AUTOINCREMENT,
		tenant     TEXT    NOT NULL,
		model      TEXT    NOT NULL,
		key        TEXT    NOT NULL,
		op_id      TEXT    NOT NULL,
		op         TEXT    NOT NULL CHECK (op IN ('put', 'delete')),
		value      BLOB,
		version    INTEGER NOT NULL CHECK (version > 0),
		wall       INTEGER NOT NULL,
		logical    INTEGER NOT NULL,
		origin     TEXT    NOT NULL,
		client_id  TEXT    NOT NULL,
		applied_at INTEGER NOT NULL
	, scope_old TEXT, scope_value TEXT, member TEXT, grants TEXT);
CREATE TABLE oplog_meta (
		id    INTEGER PRIMARY KEY CHECK (id = 1),
		floor INTEGER NOT NULL
	, counted INTEGER NOT NULL DEFAULT 0);
CREATE TABLE oplog_tenants (
		tenant  TEXT    NOT NULL PRIMARY KEY,
		entries INTEGER NOT NULL,
		floor   INTEGER NOT NULL DEFAULT 0
	) WITHOUT ROWID;
CREATE TABLE records (
	tenant  TEXT    NOT NULL,
	model   TEXT    NOT NULL,
	key     TEXT    NOT NULL,
	value   BLOB,
	version INTEGER NOT NULL CHECK (version > 0),
	hlc     TEXT    NOT NULL,
	wall    INTEGER NOT NULL,
	logical INTEGER NOT NULL,
	origin  TEXT    NOT NULL,
	deleted INTEGER NOT NULL,
	op_id   TEXT    NOT NULL,
	seq     INTEGER NOT NULL, scope_value TEXT, member TEXT,
	PRIMARY KEY (tenant, model, key)
);
CREATE TABLE records_state (
	id          INTEGER PRIMARY KEY CHECK (id = 1),
	applied_seq INTEGER NOT NULL
, scope_decl TEXT);
CREATE TABLE requested_sets (
		tenant    TEXT    NOT NULL,
		client_id TEXT    NOT NULL,
		user_id   TEXT    NOT NULL,
		scopes    TEXT    NOT NULL,
		set_at    INTEGER NOT NULL,
		PRIMARY KEY (tenant, client_id)
	) WITHOUT ROWID;
CREATE TABLE requested_values (
		tenant    TEXT NOT NULL,
		scope     TEXT NOT NULL,
		value     TEXT NOT NULL,
		client_id TEXT NOT NULL,
		PRIMARY KEY (tenant, scope, value, client_id)
	) WITHOUT ROWID;
CREATE TABLE syncd_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
