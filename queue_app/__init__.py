"""A durable job queue: PostgreSQL records every job, Redis orders what runs next."""
