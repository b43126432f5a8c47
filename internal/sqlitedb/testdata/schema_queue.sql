-- user_version 1
CREATE UNIQUE INDEX items_key ON items (key) WHERE length(key) > 0;
CREATE TABLE dead_letters (
	id          INTEGER PRIMARY KEY,
	payload     BLOB    NOT NULL,
	key         BLOB    NOT NULL,
	attempts    INTEGER NOT NULL,
	enqueued_at INTEGER NOT NULL,
	reason      BLOB    NOT NULL,
	dead_at     INTEGER NOT NULL
);
CREATE TABLE items (
	id          INTEGER PRIMARY KEY AUTOINCREMENT,
	payload     BLOB    NOT NULL,
	key         BLOB    NOT NULL,
	attempts    INTEGER NOT NULL DEFAULT 0,
	enqueued_at INTEGER NOT NULL
);
