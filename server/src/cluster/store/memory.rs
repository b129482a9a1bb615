//! [`MemoryStore`]: the cluster store of a single node, in this process.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::{Saved, Saving, Segment, Store, StoreResult};

/// The single-node store: a map in this process, entries dropped at their expiry.
#[derive(Default)]
pub struct MemoryStore {
    inner: Mutex<Memory>,
}

#[derive(Default)]
struct Memory {
    journals: HashMap<String, (Saved, Instant)>,
    claims: HashMap<(String, u32), Instant>,
    requests: HashMap<(String, String), (String, String, Instant)>,
    usage: HashMap<String, HashMap<String, u64>>,
}

impl MemoryStore {
    fn lock(&self) -> std::sync::MutexGuard<'_, Memory> {
        let mut m = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        m.journals.retain(|_, (_, until)| *until > now);
        m.claims.retain(|_, until| *until > now);
        m.requests.retain(|_, (_, _, until)| *until > now);
        m
    }
}

#[async_trait]
impl Store for MemoryStore {
    fn durable(&self) -> bool {
        false
    }

    async fn save(&self, segment: Segment<'_>, owner: &str, ttl: Duration) -> StoreResult<Saving> {
        let Segment { id, header, entries, round, .. } = segment;
        let mut m = self.lock();
        let until = Instant::now() + ttl;
        let entry = m.journals.entry(id.to_string()).or_insert_with(|| {
            (Saved { header: Vec::new(), segments: Vec::new(), owner: String::new(), round: 0, image: None }, until)
        });
        if let Some(header) = header {
            entry.0.header = header.to_vec();
        }
        entry.0.segments.push(entries.to_vec());
        entry.0.owner = owner.to_string();
        entry.0.round = round;
        entry.1 = until;
        Ok(Saving::Saved)
    }

    async fn keep_image(
        &self,
        id: &str,
        _tenant: &str,
        round: u32,
        image: &[u8],
        owner: &str,
        ttl: Duration,
    ) -> StoreResult<Saving> {
        let mut m = self.lock();
        let Some(entry) = m.journals.get_mut(id) else {
            return Ok(Saving::Refused("its journal is gone".into()));
        };
        entry.0.image = Some((round, image.to_vec()));
        entry.0.owner = owner.to_string();
        entry.0.round = round;
        entry.1 = Instant::now() + ttl;
        Ok(Saving::Saved)
    }

    async fn set_owner(&self, id: &str, owner: &str, round: u32, ttl: Duration) -> StoreResult<()> {
        if let Some(entry) = self.lock().journals.get_mut(id) {
            entry.0.owner = owner.to_string();
            entry.0.round = round;
            entry.1 = Instant::now() + ttl;
        }
        Ok(())
    }

    async fn load(&self, id: &str) -> StoreResult<Option<Saved>> {
        Ok(self.lock().journals.get(id).map(|(saved, _)| saved.clone()))
    }

    async fn claim(&self, id: &str, round: u32, _claimant: &str, ttl: Duration) -> StoreResult<bool> {
        let mut m = self.lock();
        let key = (id.to_string(), round);
        if m.claims.contains_key(&key) {
            return Ok(false);
        }
        m.claims.insert(key, Instant::now() + ttl);
        Ok(true)
    }

    async fn forget(&self, id: &str) -> StoreResult<()> {
        self.lock().journals.remove(id);
        Ok(())
    }

    async fn set_request(
        &self,
        tenant: &str,
        request_id: &str,
        id: &str,
        node: &str,
        ttl: Duration,
    ) -> StoreResult<()> {
        let until = Instant::now() + ttl;
        self.lock().requests.insert((tenant.into(), request_id.into()), (id.into(), node.into(), until));
        Ok(())
    }

    async fn request(&self, tenant: &str, request_id: &str) -> StoreResult<Option<(String, String)>> {
        let m = self.lock();
        Ok(m.requests
            .get(&(tenant.to_string(), request_id.to_string()))
            .map(|(id, node, _)| (id.clone(), node.clone())))
    }

    async fn add_usage(&self, tenant: &str, name: &str, n: u64) -> StoreResult<()> {
        *self.lock().usage.entry(tenant.into()).or_default().entry(name.into()).or_default() += n;
        Ok(())
    }

    async fn usage(&self, tenant: &str) -> StoreResult<HashMap<String, u64>> {
        Ok(self.lock().usage.get(tenant).cloned().unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_memory_store_keeps_journals_until_their_expiry_and_claims_a_round_once() {
        let store = MemoryStore::default();
        let ttl = Duration::from_secs(60);
        assert!(!store.durable());
        store
            .save(Segment { id: "e", tenant: "t", header: Some(b"h"), entries: b"s1", round: 1 }, "n1", ttl)
            .await
            .unwrap();
        store.save(Segment { id: "e", tenant: "t", header: None, entries: b"s2", round: 2 }, "n1", ttl).await.unwrap();
        let saved = store.load("e").await.unwrap().unwrap();
        assert_eq!(
            (saved.header, saved.segments, saved.owner, saved.round),
            (b"h".to_vec(), vec![b"s1".to_vec(), b"s2".to_vec()], "n1".into(), 2)
        );
        store.set_owner("e", "n2", 2, ttl).await.unwrap();
        assert_eq!(store.load("e").await.unwrap().unwrap().owner, "n2");
        assert_eq!(store.keep_image("e", "t", 2, b"i2", "n2", ttl).await.unwrap(), Saving::Saved);
        let saved = store.load("e").await.unwrap().unwrap();
        assert_eq!((saved.image, saved.segments.len()), (Some((2, b"i2".to_vec())), 2));
        assert!(matches!(store.keep_image("none", "t", 1, b"i", "n2", ttl).await.unwrap(), Saving::Refused(_)));
        assert!(store.claim("e", 2, "n2", ttl).await.unwrap());
        assert!(!store.claim("e", 2, "n3", ttl).await.unwrap());
        assert!(store.claim("e", 3, "n3", ttl).await.unwrap());
        store.forget("e").await.unwrap();
        assert_eq!(store.load("e").await.unwrap(), None);

        store
            .save(
                Segment { id: "short", tenant: "t", header: Some(b"h"), entries: b"s", round: 1 },
                "n1",
                Duration::from_millis(1),
            )
            .await
            .unwrap();
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(store.load("short").await.unwrap(), None);

        store.set_request("t", "r1", "e", "n1", ttl).await.unwrap();
        assert_eq!(store.request("t", "r1").await.unwrap(), Some(("e".into(), "n1".into())));
        assert_eq!(store.request("other", "r1").await.unwrap(), None);
        store.add_usage("t", "executions", 2).await.unwrap();
        store.add_usage("t", "executions", 1).await.unwrap();
        assert_eq!(store.usage("t").await.unwrap().get("executions"), Some(&3));
    }
}
