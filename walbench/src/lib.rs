//! walbench
