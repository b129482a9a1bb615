//! The tool-call protocol, without a Store: the exchange of pending calls and their results
//! ([`exchange`], with the calls held for approval and the results charged to memory), which
//! tools wait for approval ([`approval`]), input schemas ([`schema`]), the result shapes seen
//! ([`observed`]), who may hibernate now ([`parked`]), and the tenant shares of memory and run
//! slots that held results and running guests are charged to ([`shares`]). Below it: [`crate::api`].

pub(crate) mod approval;
pub(crate) mod exchange;
pub(crate) mod observed;
pub(crate) mod parked;
pub(crate) mod schema;
pub(crate) mod shares;
