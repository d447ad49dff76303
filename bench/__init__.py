"""`python -m bench`: AgentCal's engine against its baselines, in one run on one database.

A tool, not part of the product: no installed app, nothing in the application imports it, so the web
process never loads it (tests/test_architecture.py holds both). `bench.baselines` and
`bench.baseline_wsgi` do not import Django at all (the baselines talk to PostgreSQL through psycopg only).
"""
