//! The file endpoints LibreChat's backend and `@librechat/agents` call, in the shapes they read
//! (LibreChat's `api/server/services/Files/Code/crud.js` and `process.js`):
//!
//! - `POST /upload` (multipart: `file`, and `entity_id` or `kind`/`id`/`version`, which name
//!   LibreChat's owner of the file and are not needed here): the file goes into a new session
//!   of the tenant; answers `{message: "success", session_id, storage_session_id, files:
//!   [{fileId, filename}]}`. `POST /upload/batch` takes several `file` parts into one session and
//!   answers each with a `status`.
//! - `GET /files/{session_id}?detail=summary|full`: the session's regular files, a bare array
//!   of `{name: "SESSION/ID", id, session_id, storage_session_id, size, lastModified,
//!   contentType, metadata: {"original-filename"}}`.
//! - `GET /download/{session_id}/{id}`: the file's bytes, streamed, with its type, length and
//!   a `Content-Disposition` LibreChat passes on to the browser.
//!
//! Ids are 21 characters of `[A-Za-z0-9_-]`, the only ones LibreChat's download route lets
//! through. Sessions are the tenant's own (another tenant's id is unknown here), uploads count
//! against its file quota as they arrive (past it, 507 and nothing is kept) and against
//! `--http-max-upload-bytes` (413), and files are read and written through the same
//! no-link rules as every other file path (`files.rs`).

use std::sync::Arc;
use std::time::SystemTime;

use axum::Json;
use axum::body::Body;
use axum::extract::{Multipart, Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use super::api::{ApiError, Tenant};
use super::state::HttpState;
use crate::core::files::{FilesError, Listed, SessionDir};

/// `POST /upload`: one file, into a new session.
pub(crate) async fn upload(
    State(state): State<Arc<HttpState>>,
    Tenant(tenant): Tenant,
    multipart: Multipart,
) -> Result<Response, ApiError> {
    let (session, outcomes) = receive(&state, &tenant, multipart, false).await?;
    match outcomes.into_iter().next() {
        Some((_, Ok(file))) => Ok(Json(json!({
            "message": "success",
            "session_id": session,
            "storage_session_id": session,
            "files": [uploaded(&session, &file)],
        }))
        .into_response()),
        Some((_, Err(e))) => Err(e),
        None => Err(ApiError::bad_request("no file: send it in the multipart field `file`")),
    }
}

/// `POST /upload/batch`: several files, into one new session; each answered with a status.
pub(crate) async fn upload_batch(
    State(state): State<Arc<HttpState>>,
    Tenant(tenant): Tenant,
    multipart: Multipart,
) -> Result<Response, ApiError> {
    let (session, outcomes) = receive(&state, &tenant, multipart, true).await?;
    if outcomes.is_empty() {
        return Err(ApiError::bad_request("no file: send them in multipart fields named `file`"));
    }
    let succeeded = outcomes.iter().filter(|(_, o)| o.is_ok()).count();
    let files: Vec<Value> = outcomes
        .iter()
        .map(|(name, o)| match o {
            Ok(file) => {
                let mut entry = uploaded(&session, file);
                entry["status"] = json!("success");
                entry
            }
            Err(e) => json!({"status": "error", "filename": name, "error": e.message()}),
        })
        .collect();
    let message = if succeeded == 0 { "error" } else { "success" };
    Ok(Json(json!({
        "message": message, "session_id": session, "storage_session_id": session, "files": files,
        "succeeded": succeeded, "failed": outcomes.len() - succeeded,
    }))
    .into_response())
}

fn uploaded(session: &str, file: &Listed) -> Value {
    json!({"fileId": file.id, "filename": file.name, "id": file.id, "name": file.name, "session_id": session, "size": file.size})
}

/// What became of each `file` part, by its name.
type Outcomes = Vec<(String, Result<Listed, ApiError>)>;

/// Reads the multipart body into a new session of the tenant: every `file` part (only the
/// first unless `several`), each within the upload limit and the quota, all within the upload
/// time. A part that breaks a bound leaves nothing behind.
async fn receive(
    state: &HttpState,
    tenant: &str,
    mut multipart: Multipart,
    several: bool,
) -> Result<(String, Outcomes), ApiError> {
    let id = crate::core::files::new_session_id();
    let (store, t, i) = (state.files.clone(), tenant.to_string(), id.clone());
    let session = Arc::new(blocking(move || store.open_session(&t, &i)).await?);
    let limits = &state.limits;
    let reading = async {
        let mut outcomes = Vec::new();
        while let Some(field) = multipart.next_field().await.map_err(multipart_error)? {
            if field.name() != Some("file") {
                continue; // entity_id, kind, id, version: LibreChat's, not needed here
            }
            if !outcomes.is_empty() && !several {
                return Err(ApiError::bad_request("one file per upload: use /upload/batch for several"));
            }
            let name = field.file_name().map(str::to_owned).unwrap_or_default();
            let outcome = write(state, &session, &name, field).await;
            outcomes.push((name, outcome));
        }
        Ok(outcomes)
    };
    let outcomes = tokio::time::timeout(limits.upload_timeout, reading).await.map_err(|_| {
        ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            format!("Upload not received within {} s", limits.upload_timeout.as_secs()),
        )
    });
    let outcomes = match outcomes.and_then(|o| o) {
        Ok(outcomes) if outcomes.iter().any(|(_, o)| o.is_ok()) => outcomes,
        other => {
            // Nothing kept: the session goes too.
            let (store, session) = (state.files.clone(), session.clone());
            let _ = tokio::task::spawn_blocking(move || store.remove_session(&session)).await;
            return other.map(|o| (id, o));
        }
    };
    let (store, s) = (state.files.clone(), session.clone());
    blocking(move || store.refresh(&s)).await?;
    Ok((id, outcomes))
}

/// Streams one part into `name` in `session`, counting it against the upload limit and the
/// tenant's quota as it arrives.
async fn write(
    state: &HttpState,
    session: &Arc<SessionDir>,
    name: &str,
    mut field: axum::extract::multipart::Field<'_>,
) -> Result<Listed, ApiError> {
    let (store, s, n) = (state.files.clone(), session.clone(), name.to_string());
    let ((room, one_more), file) = blocking(move || Ok((store.room(&s)?, store.create(&s, &n)?))).await?;
    let limit = state.limits.max_upload_bytes;
    let quota = |message: String| ApiError::new(StatusCode::INSUFFICIENT_STORAGE, message);
    let mut file = tokio::fs::File::from_std(file);
    let mut written = 0u64;
    let result = async {
        if !one_more {
            return Err(quota(format!("File quota exceeded: this key keeps {} files already", state.files.config().quota_files)));
        }
        while let Some(chunk) = field.chunk().await.map_err(multipart_error)? {
            written += chunk.len() as u64;
            if written > limit {
                return Err(ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("{name:?} is larger than the upload limit of {limit} bytes"),
                ));
            }
            if written > room {
                return Err(quota(format!(
                    "File quota exceeded: uploading {name:?} would leave this key over its {} bytes; delete files it no \
                     longer needs first",
                    state.files.config().quota_bytes
                )));
            }
            file.write_all(&chunk).await.map_err(|e| ApiError::from(FilesError::Io(format!("writing an upload: {e}"))))?;
        }
        file.flush().await.map_err(|e| ApiError::from(FilesError::Io(format!("writing an upload: {e}"))))?;
        // Uploads of one tenant at the same time each saw the room before the others wrote.
        let (store, s) = (state.files.clone(), session.clone());
        blocking(move || store.check(&s)).await
    }
    .await;
    drop(file);
    match result {
        Ok(()) => Ok(Listed {
            id: crate::core::files::file_id(&session.id, name),
            name: name.to_string(),
            size: written,
            modified: Some(SystemTime::now()),
        }),
        Err(e) => {
            let (store, s, n) = (state.files.clone(), session.clone(), name.to_string());
            let _ = tokio::task::spawn_blocking(move || store.remove(&s, &n)).await;
            Err(e)
        }
    }
}

fn multipart_error(e: axum::extract::multipart::MultipartError) -> ApiError {
    ApiError::new(e.status(), format!("the upload is not a valid multipart body: {}", e.body_text()))
}

/// `GET /files/{session_id}`: the session's files (`detail` and LibreChat's other query
/// parameters change nothing: every entry has every field).
pub(crate) async fn list(
    State(state): State<Arc<HttpState>>,
    Tenant(tenant): Tenant,
    Path(session_id): Path<String>,
) -> Result<Response, ApiError> {
    let store = state.files.clone();
    let sid = session_id.clone();
    let files = blocking(move || match store.existing_session(&tenant, &sid) {
        Some(session) => store.list(&session).map(Some),
        None => Ok(None),
    })
    .await?
    .ok_or_else(|| no_session(&session_id))?;
    let listed: Vec<Value> = files
        .iter()
        .map(|f| {
            json!({
                "name": format!("{session_id}/{}", f.id), "id": f.id, "session_id": session_id,
                "storage_session_id": session_id, "size": f.size, "lastModified": f.modified.map(rfc3339),
                "contentType": content_type(&f.name), "metadata": {"original-filename": f.name},
            })
        })
        .collect();
    Ok(Json(listed).into_response())
}

/// `GET /download/{session_id}/{id}`: the file, streamed from disk.
pub(crate) async fn download(
    State(state): State<Arc<HttpState>>,
    Tenant(tenant): Tenant,
    Path((session_id, id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let store = state.files.clone();
    let (sid, fid) = (session_id.clone(), id.clone());
    let found =
        blocking(move || Ok(store.existing_session(&tenant, &sid).and_then(|s| store.open_by_id(&s, &fid)))).await?;
    let Some((file, listed)) = found else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no file {id:?} in session {session_id:?}: it was never there, or it changed name since"),
        ));
    };
    // What the file held when it was opened: a file that grows meanwhile is cut at that size.
    let reader = tokio::io::AsyncReadExt::take(tokio::fs::File::from_std(file), listed.size);
    let mut response = Body::from_stream(tokio_util::io::ReaderStream::new(reader)).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type(&listed.name)));
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(listed.size));
    if let Ok(value) = HeaderValue::from_str(&disposition(&listed.name)) {
        headers.insert(header::CONTENT_DISPOSITION, value);
    }
    Ok(response)
}

fn no_session(session_id: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!("no session {session_id:?}: it was never created, or its files expired"),
    )
}

/// Runs file work on the blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, FilesError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(FilesError::Io(format!("file work failed: {e}"))))
        .map_err(ApiError::from)
}

/// `attachment; filename="NAME"` (the last path component), with `filename*` for any name
/// that is not plain ASCII.
fn disposition(name: &str) -> String {
    let base = name.rsplit('/').next().unwrap_or(name);
    let plain: String =
        base.chars().map(|c| if c.is_ascii_graphic() && c != '"' && c != '\\' || c == ' ' { c } else { '_' }).collect();
    let mut value = format!("attachment; filename=\"{plain}\"");
    if plain != base {
        let encoded: String = base
            .bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect();
        value.push_str(&format!("; filename*=UTF-8''{encoded}"));
    }
    value
}

/// The type a file's extension names (what LibreChat and browsers go by).
fn content_type(name: &str) -> &'static str {
    let ext = name.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase()).unwrap_or_default();
    match ext.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "svg" => "image/svg+xml",
        "csv" => "text/csv",
        "txt" | "log" => "text/plain; charset=utf-8",
        "md" => "text/markdown; charset=utf-8",
        "json" => "application/json",
        "html" | "htm" => "text/html; charset=utf-8",
        "pdf" => "application/pdf",
        "xlsx" => "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        "zip" => "application/zip",
        _ => "application/octet-stream",
    }
}

/// `2026-11-24T15:17:34.000Z`: what `new Date()` reads in LibreChat.
fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        d.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_names_as_librechat_reads_them() {
        assert_eq!(rfc3339(SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(1_795_533_454_123);
        assert_eq!(rfc3339(t), "2026-11-24T15:17:34.123Z");
        let leap = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(951_782_400);
        assert_eq!(rfc3339(leap), "2000-02-29T00:00:00.000Z");
        assert_eq!(disposition("out/chart.png"), "attachment; filename=\"chart.png\"");
        assert_eq!(disposition("é\".txt"), "attachment; filename=\"__.txt\"; filename*=UTF-8''%C3%A9%22.txt");
        assert_eq!(content_type("A.CSV"), "text/csv");
        assert_eq!(content_type("noext"), "application/octet-stream");
    }
}
