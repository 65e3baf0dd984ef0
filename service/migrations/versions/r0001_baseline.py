"""Baseline: the store's schema as arenaplan created it before migrations.

Revision ID: 0001
Revises: (none)

Databases made by that code (`Base.metadata.create_all`) are stamped at this revision rather
than upgraded through it, so it must stay exactly that schema: columns, nullability, indexes.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "models",
        sa.Column("sha256", sa.String(64), primary_key=True),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
    )
    op.create_table(
        "plan_jobs",
        sa.Column("plan_id", sa.String(32), primary_key=True),
        sa.Column("model_sha256", sa.String(64), nullable=False),
        sa.Column("planner_version", sa.String(64), nullable=False),
        sa.Column("request_json", sa.Text(), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=True),
        sa.Column("finished_at", sa.Float(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("owner", sa.String(200), nullable=True),
        sa.Column("lease_until", sa.Float(), nullable=True),
        sa.Column("progress_json", sa.Text(), nullable=True),
        sa.Column("plan_json", sa.Text(), nullable=True),
        sa.Column("error_json", sa.Text(), nullable=True),
        sa.Column("error_status", sa.Integer(), nullable=True),
        sa.Column("retryable", sa.Boolean(), nullable=False),
        sa.Column("solve_seconds", sa.Float(), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
    )
    op.create_index("ix_plan_jobs_model_sha256", "plan_jobs", ["model_sha256"])
    op.create_index("ix_plan_jobs_state_created", "plan_jobs", ["state", "created_at"])
    op.create_table(
        "plan_access",
        sa.Column("namespace", sa.String(200), primary_key=True),
        sa.Column("plan_id", sa.String(32), sa.ForeignKey("plan_jobs.plan_id"),
                  primary_key=True),
        sa.Column("created_at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("plan_access")
    op.drop_table("plan_jobs")
    op.drop_table("models")
