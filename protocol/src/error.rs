//! Errors as PostgreSQL reports them: defined in the `pgerror` crate (so
//! that the WAL engine can use them without this crate), re-exported here
//! for the wire protocol and the SQL layer.

pub use pgerror::{sqlstate, SqlError};
