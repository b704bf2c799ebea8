-- Runs once, on the first start of an empty PostgreSQL volume: Kong and Keycloak get their own
-- databases beside the platform's (POSTGRES_DB), owned by the same role.
CREATE DATABASE kong;
CREATE DATABASE keycloak;
