//! This node's part in the node pools (docs/routing.md): a gateway runs the tunnel to
//! the other pools' gateways and routes their CIDRs into it; any other node routes them
//! through its pool's active gateway, the first of the pool's gateways (in the
//! configured order) that answers its probes (`xwire_gateway::probe`). So when the
//! active gateway's daemon dies, the pool moves to the next one within about half a
//! second, and moves back once the first one answers again with a tunnel up.

use std::collections::BTreeSet;
use std::net::SocketAddr;

use xwire_gateway::{Gateway, GatewayConfig, GatewayProbe};
use xwire_model::pools::{GatewaySpec, Pools};

use super::Node;
use crate::config::{DaemonConfig, PoolsConfig};
use crate::netns::NetnsFd;
use crate::routing::{self, PodRouting, Route, Rule, Selector};

/// The TUN device a gateway routes the other pools' CIDRs into.
pub(crate) const TUN_NAME: &str = "xwgw0";

pub(super) struct PoolRole {
    config: PoolsConfig,
    pools: Pools,
    my_pool: usize,
    /// Running when this node is one of its pool's gateways.
    gateway: Option<Gateway>,
    /// Running when it is not: which of the pool's gateways answer.
    probe: Option<GatewayProbe>,
    /// The gateway the routes go through now (a node that is not a gateway).
    active: Option<String>,
}

impl PoolRole {
    /// The role `config` gives node `me`; a gateway's tunnel starts here.
    pub(super) fn start(
        me: &str,
        my_address: std::net::IpAddr,
        config: &PoolsConfig,
        identity: Option<&xwire_pki::NodeIdentity>,
    ) -> Result<PoolRole, String> {
        let pools = Pools::new(&config.pools)?;
        let my_pool = pools
            .all()
            .iter()
            .position(|p| p.name == config.member_of)
            .ok_or_else(|| format!("no pool is named {}", config.member_of))?;
        let is_gateway = pools.all()[my_pool].gateways.iter().any(|g| g.node == me);
        let gateway = if is_gateway {
            let identity = identity.ok_or("a gateway needs the node's certificate")?;
            let gateway_config = GatewayConfig {
                node: me.to_owned(),
                pools: pools.clone(),
                tun_name: TUN_NAME.into(),
                tunnel_mtu: config.tunnel_mtu(),
                wan_mtu: config.wan_mtu,
            };
            Some(Gateway::start(gateway_config, identity).map_err(|e| e.to_string())?)
        } else {
            None
        };
        let probe = if is_gateway {
            None
        } else {
            let gateways = pools.all()[my_pool]
                .gateways
                .iter()
                .map(|g| {
                    let port = xwire_gateway::probe::probe_port(g.wan.port());
                    (g.node.clone(), SocketAddr::new(g.address, port))
                })
                .collect();
            let bind = SocketAddr::new(my_address, 0);
            Some(
                GatewayProbe::start(bind, gateways)
                    .map_err(|e| format!("probe the gateways from {bind}: {e}"))?,
            )
        };
        Ok(PoolRole {
            config: config.clone(),
            pools,
            my_pool,
            gateway,
            probe,
            active: None,
        })
    }

    /// The gateway this node's routes should go through: none for a gateway (its own
    /// tunnel), else the first of the pool's that is up, or the first of all while none
    /// is (at a start, before any connection is up).
    fn active_gateway(&self) -> Option<&GatewaySpec> {
        let probe = self.probe.as_ref()?;
        let pool = &self.pools.all()[self.my_pool];
        pool.active_gateway(|name| probe.is_up(name))
            .or_else(|| pool.gateways.first())
    }

    /// The rules and routes of the pools' table.
    fn desired(&self) -> PodRouting {
        let mut want = PodRouting::default();
        let table = self.config.table;
        let active = self.active_gateway();
        for (index, pool) in self.pools.all().iter().enumerate() {
            if index == self.my_pool {
                continue;
            }
            for net in &pool.cidrs {
                let cidr = (net.addr(), net.prefix_len());
                want.rules.insert(Rule {
                    selector: Selector::To(cidr),
                    table,
                    priority: self.config.rule_priority,
                });
                let route = match (&self.gateway, active) {
                    (Some(_), _) => Route {
                        table,
                        dst: cidr,
                        via: None,
                        dev: Some(TUN_NAME.into()),
                        src: None,
                        mtu: None,
                    },
                    (None, Some(gateway)) => Route {
                        table,
                        dst: cidr,
                        via: Some(gateway.address),
                        dev: None,
                        src: None,
                        mtu: Some(u32::from(self.config.tunnel_mtu())),
                    },
                    (None, None) => continue,
                };
                want.routes.insert(route);
            }
        }
        want
    }

    /// What `lab status` and the tests read: the pool, the role, the gateway in use and
    /// the tunnels.
    pub(super) fn state(&self) -> serde_json::Value {
        let pool = &self.pools.all()[self.my_pool];
        let mut state = serde_json::json!({
            "pool": pool.name,
            "gateway": self.gateway.is_some(),
        });
        if let Some(active) = &self.active {
            state["active_gateway"] = serde_json::json!(active);
        }
        if let Some(gateway) = &self.gateway {
            let tunnels: BTreeSet<String> = gateway.tunnels_up().into_iter().collect();
            state["tunnels_up"] = serde_json::json!(tunnels);
            state["counters"] = serde_json::json!(gateway.counters());
        }
        state
    }
}

impl Node {
    /// The gateway the routes should go through changed (its probes stopped, or the
    /// first one answers again): the routes follow. Says whether they did.
    pub(crate) fn pump_pools(&mut self) -> bool {
        let Some(role) = &self.routing.pools else {
            return false;
        };
        let active = role.active_gateway().map(|g| g.node.clone());
        if active == role.active {
            return false;
        }
        self.routing.sync_pool_routes(&self.netns.node_ns);
        true
    }
}

impl super::Routing {
    /// The pools the cluster's Node labels make now (`None`: this node is in none): the
    /// role is made anew when they changed (a gateway's tunnel restarts with it), and the
    /// routes follow.
    pub(super) fn apply_labelled_pools(
        &mut self,
        labelled: Option<crate::membership::LabelledPools>,
        daemon: &DaemonConfig,
        node_ns: &NetnsFd,
    ) {
        let base = daemon.pools.clone().unwrap_or_default();
        let Some(labelled) = labelled else {
            if self.pools.take().is_some() {
                tracing::info!("pools: this node is in no pool any more");
            }
            let cleared = routing::sync_table(node_ns, base.table, &PodRouting::default());
            if let Err(e) = cleared {
                tracing::warn!("pools: {e}");
            }
            return;
        };
        let config = PoolsConfig {
            member_of: labelled.member_of,
            pools: labelled.pools,
            ..base
        };
        if self
            .pools
            .as_ref()
            .is_some_and(|role| role.config == config)
        {
            return;
        }
        // The old role's gateway and probes stop before the new one's start.
        self.pools = None;
        let me = daemon.node_address.ip();
        match PoolRole::start(&daemon.node_name, me, &config, self.identity.as_ref()) {
            Ok(role) => {
                tracing::info!(pool = %config.member_of, pools = config.pools.len(), "pools: from the Node labels");
                self.pools = Some(role);
            }
            Err(e) => tracing::warn!("pools from the Node labels: {e}"),
        }
        self.sync_pool_routes(node_ns);
    }

    /// What the pools ask of their table, and what it has, for a pass over the whole
    /// node (`plan/routes.rs`); nothing when the node is in no pool.
    pub(super) fn observe_pool_routing(
        &self,
        node_ns: &NetnsFd,
        failures: &mut Vec<String>,
    ) -> (Option<PodRouting>, Option<routing::RoutingSeen>) {
        let Some(role) = &self.pools else {
            return (None, None);
        };
        match routing::observe_table(node_ns, role.config.table) {
            Ok(seen) => (Some(role.desired()), Some(seen)),
            Err(e) => {
                failures.push(format!("pools: {e}"));
                (None, None)
            }
        }
    }

    /// Brings the pools' table and its rules to what the role asks for now (at the
    /// start, when a gateway comes or goes, and when a pass over the node finds them
    /// other than that: a gateway's TUN device made again takes its routes with it).
    pub(super) fn sync_pool_routes(&mut self, node_ns: &NetnsFd) {
        let Some(role) = &mut self.pools else {
            return;
        };
        if role.gateway.is_some() {
            for path in [
                "/proc/sys/net/ipv4/ip_forward",
                "/proc/sys/net/ipv6/conf/all/forwarding",
            ] {
                if let Err(e) = std::fs::write(path, "1") {
                    tracing::warn!("pools: a gateway forwards, but {path}: {e}");
                }
            }
        }
        let active = role.active_gateway().map(|g| g.node.clone());
        if active != role.active {
            if let Some(gateway) = &active {
                tracing::info!(%gateway, pool = %role.config.member_of, "pools: routing through gateway");
            }
            role.active = active;
        }
        let want = role.desired();
        match routing::sync_table(node_ns, role.config.table, &want) {
            Ok(synced) => {
                for change in synced.changed {
                    tracing::info!("pools: {change}");
                }
                for refused in synced.refused {
                    tracing::warn!("pools: {refused}");
                }
            }
            Err(e) => tracing::warn!("pools: {e}"),
        }
    }
}
