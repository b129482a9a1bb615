//! Host bindings generated from the sandbox's WIT world (`runtime-python-wasm/wit`): every
//! import is async and may trap (that is how the host ends an instance), every export async.

wasmtime::component::bindgen!({
    path: "../runtime-python-wasm/wit",
    world: "sandbox",
    imports: { default: async | trappable },
    exports: { default: async },
});
