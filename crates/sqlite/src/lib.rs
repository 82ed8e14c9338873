//! The embedded SQLite store of idemgate.
