//! Lifecycle: how stores are made ([`stores`]), instances made ahead of demand ([`warm`]), the
//! sleep policy ([`sleep`]), an execution ([`execution`]), its spans ([`trace`]) and the task that drives it
//! ([`job`]), what the host does for a JavaScript program before it runs ([`javascript`]), and live sessions ([`session`]). Below it: [`crate::pages`] (hibernation's mechanism),
//! [`crate::instance`], [`crate::calls`], [`crate::api`], [`crate::net`]. Above it only the
//! [`crate::engine::Engine`] facade.

pub(crate) mod execution;
pub(crate) mod javascript;
pub(crate) mod job;
pub(crate) mod session;
pub(crate) mod sleep;
pub(crate) mod stores;
pub(crate) mod trace;
pub(crate) mod warm;
