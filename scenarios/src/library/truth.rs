//! The truth at the service: who holds a library's lock now, read by the lab with the service's
//! own client — not by the library, and not by the holder's word. A library holder says where
//! its holding lives (`HOLDING key=K owner=O`); the lab reads K: a Redis key's value, an etcd
//! key's value, or on ZooKeeper the data of the lowest-numbered child under the lock path (the
//! node that holds the lock in the lock recipe every ZooKeeper library implements).

use std::time::Duration;

use etcd_client::Client as Etcd;
use fencing::lease::StoreId;
use zookeeper_client as zk;

/// How long one reading may take before it is an error.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// A value stored at the service, as both sides show it: its text when every byte is printable
/// ASCII other than a space, else `hex:` and its bytes (`libholder.shown_value`, the same rule).
pub fn shown_value(raw: &[u8]) -> String {
    if !raw.is_empty() && raw.iter().all(|b| (0x21..=0x7e).contains(b)) {
        String::from_utf8_lossy(raw).into_owned()
    } else {
        let hex: String = raw.iter().map(|b| format!("{b:02x}")).collect();
        format!("hex:{hex}")
    }
}

/// Who holds the lock at `key` on the service `store` (`redis`, `etcd`, `zookeeper`, or
/// `redlock`: N Redis servers, `endpoint` comma-separated) at `endpoint`: what the library stored there for the holding in force, `None` when nobody
/// holds it.
pub async fn owner(store: StoreId, endpoint: &str, key: &str) -> anyhow::Result<Option<String>> {
    let read = async {
        match store {
            StoreId::Redis | StoreId::RedisPlain => redis_owner(endpoint, key).await,
            StoreId::Redlock => redlock_owner(endpoint, key).await,
            StoreId::Etcd => etcd_owner(endpoint, key).await,
            StoreId::Zookeeper => zk_owner(endpoint, key).await,
            #[cfg(feature = "mariadb")]
            StoreId::MariadbGetlock => {
                let held = fencing::lease::mariadb_getlock::connection_holding(endpoint, key);
                Ok(held.await?.map(|id| format!("connection={id}")))
            }
            other => anyhow::bail!("no reader of the truth at {other}"),
        }
    };
    tokio::time::timeout(READ_TIMEOUT, read)
        .await
        .map_err(|_| anyhow::anyhow!("reading {key} at {store} {endpoint} took over 5 s"))?
}

/// Who holds the advisory lock `advisory:<key>` (one bigint below 2^31) or `advisory:<k1>:<k2>`
/// (two ints, as tooz takes it) on the lab's lease database: the `application_name` of the
/// session the server shows holding it — the name the holder gave its connection.
pub async fn advisory_owner(pool: &sqlx::PgPool, key: &str) -> anyhow::Result<Option<String>> {
    use fencing::lease::pg_advisory::AdvisoryKey;
    let parts: Vec<&str> = key
        .strip_prefix("advisory:")
        .map(|k| k.split(':').collect())
        .unwrap_or_default();
    let parsed = match parts[..] {
        [one] => one.parse().ok().map(AdvisoryKey::One),
        [a, b] => a
            .parse()
            .ok()
            .zip(b.parse().ok())
            .map(|(a, b)| AdvisoryKey::Two(a, b)),
        _ => None,
    };
    let key = parsed.ok_or_else(|| {
        anyhow::anyhow!("{key}: not an advisory lock's key (advisory:<n> or advisory:<n>:<m>)")
    })?;
    let read = fencing::lease::pg_advisory::session_holding(pool, key);
    Ok(tokio::time::timeout(READ_TIMEOUT, read)
        .await
        .map_err(|_| anyhow::anyhow!("reading pg_locks took over 5 s"))??)
}

async fn redis_owner(endpoint: &str, key: &str) -> anyhow::Result<Option<String>> {
    let client = redis::Client::open(format!("redis://{endpoint}/"))?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let value: Option<Vec<u8>> = redis::cmd("GET").arg(key).query_async(&mut conn).await?;
    Ok(value.map(|v| shown_value(&v)))
}

/// Redlock's N servers (`endpoint` comma-separated): the owner whose value a majority of them
/// hold — what Redlock counts as holding the lock —, `None` when no value has a majority. A
/// server that does not answer counts for nobody.
async fn redlock_owner(endpoints: &str, key: &str) -> anyhow::Result<Option<String>> {
    let servers: Vec<&str> = endpoints.split(',').collect();
    let mut values = Vec::new();
    for endpoint in &servers {
        if let Ok(Some(value)) = redis_owner(endpoint, key).await {
            values.push(value);
        }
    }
    Ok(values
        .iter()
        .find(|v| values.iter().filter(|w| w == v).count() > servers.len() / 2)
        .cloned())
}

async fn etcd_owner(endpoint: &str, key: &str) -> anyhow::Result<Option<String>> {
    let mut client = Etcd::connect([format!("http://{endpoint}")], None).await?;
    let got = client.get(key, None).await?;
    Ok(got.kvs().first().map(|kv| shown_value(kv.value())))
}

/// The sequence number a lock node's name ends with (its last ten digits).
fn sequence(child: &str) -> Option<u64> {
    let digits = child.get(child.len().checked_sub(10)?..)?;
    digits.parse().ok()
}

async fn zk_owner(endpoint: &str, path: &str) -> anyhow::Result<Option<String>> {
    let client = zk::Client::connector()
        .with_session_timeout(Duration::from_secs(5))
        .with_connection_timeout(READ_TIMEOUT)
        .connect(endpoint)
        .await?;
    let children = match client.list_children(path).await {
        Ok(children) => children,
        Err(zk::Error::NoNode) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let Some(first) = children
        .iter()
        .filter_map(|c| sequence(c).map(|n| (n, c)))
        .min()
        .map(|(_, c)| c)
    else {
        return Ok(None);
    };
    match client.get_data(&format!("{path}/{first}")).await {
        Ok((data, _)) => Ok(Some(shown_value(&data))),
        // Gone between the listing and the read: its holding just ended.
        Err(zk::Error::NoNode) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_show_as_text_or_hex_by_the_holders_rule() {
        assert_eq!(shown_value(b"holder-a"), "holder-a");
        assert_eq!(shown_value(b"a b"), "hex:612062");
        assert_eq!(shown_value(&[0, 255]), "hex:00ff");
        assert_eq!(shown_value(b""), "hex:");
    }

    #[test]
    fn a_lock_nodes_sequence_is_its_last_ten_digits() {
        assert_eq!(sequence("a1b2__lock__0000000042"), Some(42));
        assert_eq!(sequence("_c_uuid-lock-0000000007"), Some(7));
        assert_eq!(sequence("short"), None);
        assert_eq!(sequence("lock-00000000x1"), None);
    }
}
