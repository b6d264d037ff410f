//! Which pods' routes and rules are to be brought to what their Topology asks for: each
//! pod the settings stage read whose xwire routes and rules differ from it, with the
//! difference in words (`crate::routing` decides what a pod should have); and, over a
//! whole node in a pool, whether the pools' table is what the pools ask for.

use super::{Action, Desired, Observed};
use crate::routing::netlink::{describe_route, describe_rule};
use crate::routing::plan::{self as routing_plan, Changes};
use crate::routing::RoutingSeen;

pub(super) fn plan(desired: &Desired, observed: &Observed) -> Vec<Action> {
    let mut actions = Vec::new();
    for (attachment, seen) in &observed.routing {
        let Some(spec) = desired.routing.get(attachment) else {
            continue;
        };
        let changes = spec.changes(seen);
        if changes.is_empty() {
            continue;
        }
        let differs = describe(&changes, seen);
        let pod = desired
            .pods
            .iter()
            .find(|p| p.attachment.key() == *attachment)
            .map_or_else(
                || attachment.to_string(),
                |p| format!("{}/{}", p.attachment.pod.namespace, p.attachment.pod.name),
            );
        actions.push(Action::Route {
            attachment: attachment.clone(),
            pod,
            differs,
        });
    }
    if let (Some(want), Some(seen)) = (&desired.pool_routing, &observed.pool_routing) {
        let changes = routing_plan::changes(want, &seen.rules, &seen.routes);
        if !changes.is_empty() {
            let differs = describe(&changes, seen);
            actions.push(Action::PoolRoutes { differs });
        }
    }
    actions
}

/// `changes` to what was found as `seen`, in words.
fn describe(changes: &Changes, seen: &RoutingSeen) -> Vec<String> {
    let mut differs = Vec::new();
    for &i in &changes.remove_rules {
        differs.push(format!(
            "rule {} is not asked for",
            describe_rule(&seen.rules[i])
        ));
    }
    for &i in &changes.remove_routes {
        let route = describe_route(&seen.routes[i]);
        differs.push(format!("route {route} is not asked for"));
    }
    for route in &changes.add_routes {
        differs.push(format!("route {} is missing", describe_route(route)));
    }
    for rule in &changes.add_rules {
        differs.push(format!("rule {} is missing", describe_rule(rule)));
    }
    differs
}
