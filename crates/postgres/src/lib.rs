//! The PostgreSQL store of idemgate.
