//! Tools as the model reads them (`describe_tools`): names, one-line signatures and a stub,
//! rendered by the Python sandbox itself (a `.pyi` stub), or for JavaScript on the host (a
//! `.d.ts`, `ptc-js-declarations`), where its pre-run check is.

use super::{DescribedTool, Engine, ToolDescription};
use crate::api::error::{Error, Result};
use crate::api::request::{Runtime, ToolDef, check_tools_size};
use crate::instance::guest::Guest;
use crate::instance::tool_lists::wit_tools;
use crate::run::javascript::check::declared;
use crate::run::stores::StoreSpec;

impl Engine {
    /// Normalised Python names, one-line signatures and a `.pyi` stub for `tools`, as the
    /// sandbox itself computes them: [`Engine::describe_tools_in`] for Python.
    pub async fn describe_tools(&self, tools: &[ToolDef], tenant: Option<&str>) -> Result<ToolDescription> {
        self.describe_tools_in(Runtime::Python, tools, tenant).await
    }

    /// How programs of `runtime` name and call `tools`: names, one-line signatures and a stub
    /// (`.pyi` for Python, `.d.ts` for JavaScript and TypeScript), as that runtime's check
    /// words them. Python's guest renders them: that takes an execution slot like any run and,
    /// for a `tenant`, one of its run slots while it renders (bounded in the guest, see
    /// `shapes.py`, and by the default deadline).
    pub async fn describe_tools_in(
        &self,
        runtime: Runtime,
        tools: &[ToolDef],
        tenant: Option<&str>,
    ) -> Result<ToolDescription> {
        // The data runtime's programs call tools as the Python component's do.
        let runtime = match runtime.instances() {
            Runtime::Javascript => Runtime::Javascript,
            _ => Runtime::Python,
        };
        check_tools_size(tools, &self.inner.config.ceilings)?;
        let listed = || wit_tools(tools, self.inner.stores.observed.as_deref(), tenant);
        if runtime == Runtime::Javascript {
            let listed = listed();
            let views: Vec<_> = listed.iter().map(declared).collect();
            let (declared, stub) = ptc_js_declarations::declarations(&views);
            let tools = declared
                .into_iter()
                .zip(tools)
                .map(|(d, def)| DescribedTool {
                    name: def.name.clone(),
                    namespace: def.namespace.clone(),
                    signature: d.line(),
                    python_name: d.code_name,
                })
                .collect();
            return Ok(ToolDescription { tools, stub });
        }
        let _permit = self.acquire().await?;
        let limits = self.inner.config.default_limits.clone();
        let spec = StoreSpec {
            limits: &limits,
            schemas: None,
            data_dir: None,
            tenant,
            runtime,
            journal: None,
            monotonic_from: 0,
            running: None,
        };
        let (mut store, _host) = self.inner.stores.new_store(spec)?;
        store.epoch_deadline_async_yield_and_update(1);
        let run_slot = store.data().broker.run_slot.clone();
        run_slot.acquire().await;
        let pre = self.inner.stores.pre(runtime).await?;
        let described = tokio::time::timeout(limits.timeout, async {
            let Guest::Component(sandbox, ..) =
                pre.instantiate(&mut store).await.map_err(|e| Error::engine("instantiating", e))?
            else {
                unreachable!("the Python runtime that describes is a component")
            };
            sandbox
                .call_describe_tools(&mut store, &listed())
                .await
                .map_err(|e| Error::engine("describing tools", e))?
                .map_err(Error::invalid)
        })
        .await
        .map_err(|_| Error::engine("describing tools", format!("timed out after {} ms", limits.timeout.as_millis())));
        run_slot.release();
        let described = described??;
        Ok(ToolDescription {
            tools: described
                .tools
                .into_iter()
                .zip(tools)
                .map(|(t, def)| DescribedTool {
                    name: t.name,
                    namespace: def.namespace.clone(),
                    python_name: t.code_name,
                    signature: t.signature,
                })
                .collect(),
            stub: described.stub,
        })
    }
}
