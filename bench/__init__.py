"""`python manage.py bench`: AgentCal's engine against its baselines, in one run on one database.

Nothing in this package is imported by the application; `bench.baselines` and `bench.baseline_wsgi`
do not import Django at all (the baselines talk to PostgreSQL through psycopg only).
"""
