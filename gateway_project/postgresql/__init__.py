"""The gateway's PostgreSQL database backend (`ENGINE = "gateway_project.postgresql"`): Django's, with a
LIFO connection pool (`gateway_project.db.LifoConnectionPool`)."""
