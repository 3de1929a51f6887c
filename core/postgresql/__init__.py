"""The gateway's PostgreSQL database backend (`ENGINE = "core.postgresql"`): Django's, with a
LIFO connection pool (`core.db.LifoConnectionPool`)."""
