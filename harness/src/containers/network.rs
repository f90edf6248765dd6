//! The run's private bridge network ([`Network`]): created through the engine's API, labelled
//! with the run's mark, removed on drop unless kept (a kept container is on it). It holds no
//! container and no traffic rule: those are `container` and `hold`.

use std::collections::HashMap;
use std::time::Instant;

use bollard::models::NetworkCreateRequest;

use super::container::block_on;
use super::{docker, fnv1a, ContainerError, LABEL};

/// A private bridge network of the run. Its bridge device on this host is `bridge`.
#[derive(Debug)]
pub struct Network {
    pub name: String,
    pub bridge: String,
    removed: bool,
}

impl Network {
    /// Creates the network, labelled with the run's `mark`.
    pub async fn create(mark: &str) -> Result<Network, ContainerError> {
        let suffix = fnv1a(&format!("{mark}{:?}", Instant::now()));
        let name = format!("fencing-lab-{suffix:08x}");
        let bridge = format!("fl{suffix:08x}");
        let request = NetworkCreateRequest {
            name: name.clone(),
            driver: Some("bridge".into()),
            labels: Some(HashMap::from([(LABEL.to_owned(), mark.to_owned())])),
            options: Some(HashMap::from([(
                "com.docker.network.bridge.name".to_owned(),
                bridge.clone(),
            )])),
            ..Default::default()
        };
        docker()
            .await?
            .create_network(request)
            .await
            .map_err(|source| {
                ContainerError::engine(format!("create the network {name}"), source)
            })?;
        Ok(Network {
            name,
            bridge,
            removed: false,
        })
    }

    /// Leaves the network in place (its kept containers are on it); `lab clean` removes it.
    pub fn keep(mut self) {
        self.removed = true;
    }

    /// Removes the network (its containers must be gone).
    pub async fn remove(mut self) {
        self.removed = true;
        remove_network(&self.name).await;
    }
}

/// Removes the network `name`, if the engine lets it (not while a container is on it).
async fn remove_network(name: &str) {
    if let Ok(docker) = docker().await {
        let _ = docker.remove_network(name).await;
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        if !self.removed {
            let name = self.name.clone();
            block_on(async move { remove_network(&name).await });
        }
    }
}
