-- The store's schema as arenaplan created it before Alembic (Base.metadata.create_all,
-- postgresql): the starting point of the migration tests. Never edit.
CREATE TABLE models (
	sha256 VARCHAR(64) NOT NULL,
	size_bytes BIGINT NOT NULL,
	created_at FLOAT NOT NULL,
	PRIMARY KEY (sha256)
);

CREATE TABLE plan_jobs (
	plan_id VARCHAR(32) NOT NULL,
	model_sha256 VARCHAR(64) NOT NULL,
	planner_version VARCHAR(64) NOT NULL,
	request_json TEXT,
	state VARCHAR(16) NOT NULL,
	created_at FLOAT NOT NULL,
	started_at FLOAT,
	finished_at FLOAT,
	attempts INTEGER NOT NULL,
	owner VARCHAR(200),
	lease_until FLOAT,
	progress_json TEXT,
	plan_json TEXT,
	error_json TEXT,
	error_status INTEGER,
	retryable BOOLEAN NOT NULL,
	solve_seconds FLOAT,
	note TEXT,
	PRIMARY KEY (plan_id)
);

CREATE INDEX ix_plan_jobs_model_sha256 ON plan_jobs (model_sha256);

CREATE INDEX ix_plan_jobs_state_created ON plan_jobs (state, created_at);

CREATE TABLE plan_access (
	namespace VARCHAR(200) NOT NULL,
	plan_id VARCHAR(32) NOT NULL,
	created_at FLOAT NOT NULL,
	PRIMARY KEY (namespace, plan_id),
	FOREIGN KEY(plan_id) REFERENCES plan_jobs (plan_id)
);
