//! Outbound HTTP for programs: the host function behind the global `fetch` (`runtime.js`). The
//! host checks each request against the execution's network policy, puts secrets in where
//! their placeholders are, and returns the whole response (redirects as they are: `fetch`
//! follows them, each a request the policy checks). Without a policy every request is refused.
//! A request blocks the program until its response, as Python's `urllib` does.

use rquickjs::function::Func;
use rquickjs::{Ctx, Exception, Object, Result, TypedArray, Value};

use crate::ptc::sandbox::host::{self, HttpError, HttpRequest};

/// The functions `runtime.js` makes `fetch` of, in one object.
pub(crate) fn host<'js>(ctx: &Ctx<'js>) -> Result<Object<'js>> {
    let host = Object::new(ctx.clone())?;
    host.set("fetch", Func::from(fetch))?;
    host.set(
        "decode",
        Func::from(|bytes: TypedArray<'js, u8>| {
            // SAFETY: copied at once; no JavaScript runs while the slice is alive.
            String::from_utf8_lossy(unsafe { bytes.as_bytes() }.unwrap_or_default()).into_owned()
        }),
    )?;
    Ok(host)
}

/// One request: `[status, reason, [[name, value]...], body]`, or a `TypeError` in the host's
/// words (`cause.code`: `refused`, `failed` or `timed-out`).
fn fetch<'js>(
    ctx: Ctx<'js>,
    method: String,
    url: String,
    headers: Vec<Vec<String>>,
    body: Value<'js>,
    timeout: Option<f64>,
) -> Result<Object<'js>> {
    let body = crate::files::bytes_of(&ctx, body)?;
    let headers = headers.into_iter().filter_map(|mut h| Some((h.remove(0), h.pop()?))).collect();
    let request = HttpRequest { method, url, headers, body, timeout_ms: timeout.map(|t| t.max(0.0) as u64) };
    match host::fetch(&request) {
        Ok(response) => {
            let out = Object::new(ctx.clone())?;
            out.set("status", response.status)?;
            out.set("reason", response.reason)?;
            let headers: Vec<Vec<String>> = response.headers.into_iter().map(|(k, v)| vec![k, v]).collect();
            out.set("headers", headers)?;
            out.set("body", TypedArray::<u8>::new(ctx.clone(), response.body)?)?;
            Ok(out)
        }
        Err(e) => {
            let (code, words) = match e {
                HttpError::Refused(w) => ("refused", w),
                HttpError::Failed(w) => ("failed", w),
                HttpError::TimedOut(w) => ("timed-out", w),
            };
            let error = Exception::from_message(ctx.clone(), &format!("fetch failed: {words}"))?;
            error.set("name", "TypeError")?;
            let cause = Object::new(ctx.clone())?;
            cause.set("code", code)?;
            cause.set("message", words)?;
            error.set("cause", cause)?;
            Err(ctx.throw(error.into_value()))
        }
    }
}
