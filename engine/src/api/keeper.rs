//! What an engine hands a caller's store at each hibernation: the sealed image of an execution
//! ([`Hibernated`]) and the store's side of it ([`Keeper`]), so that another engine with the
//! same seal key can thaw it.

use std::future::Future;
use std::pin::Pin;

/// A hibernated execution, sealed, as its request's [`Keeper`] receives it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Hibernated {
    pub execution_id: String,
    pub tenant: Option<String>,
    /// The round of tool calls it waits on ([`crate::api::events::Event::ToolCalls`]'s `round`).
    pub round: u32,
    /// Some of its calls wait for a person's decision ([`crate::run::execution::Control::decide`]).
    pub asking: bool,
    /// The sealed bytes, for [`crate::engine::Engine::thaw`].
    pub bytes: Vec<u8>,
}

/// Where an execution's sealed image goes when it hibernates (a cluster's shared store, a
/// disk): [`crate::api::request::ExecutionRequest::keeper`]. When `keep` fails, the execution does not
/// hibernate and stays live where it is: a store that is down loses nothing.
pub trait Keeper: Send + Sync + std::fmt::Debug {
    fn keep(&self, image: Hibernated) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>>;

    /// A live session thawed from its last image is about to run a command: from now on the
    /// image no longer holds all of it, so a keeper that others thaw from must stop them
    /// (until the next `keep`). A failure is logged; the command runs.
    fn thawed(&self) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>> {
        Box::pin(async { Ok(()) })
    }
}
