//! What a containerlab kind's image has that the lab file carries per pod: the command
//! that saves its running configuration as its startup one (containerlab's `save`
//! manual page). Kinds that save over NETCONF or a console (SR OS, IOL) have none that
//! runs in the container.

/// The save command of a node of kind `kind`, run in its container with `sh -c`.
pub(super) fn save_command(kind: &str) -> Option<&'static str> {
    match kind {
        "nokia_srlinux" | "srl" => Some("sr_cli -d tools system configuration save"),
        "arista_ceos" | "ceos" => Some("Cli -p 15 -c wr"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_with_a_save_command_in_their_image_have_it_and_others_none() {
        assert_eq!(
            save_command("nokia_srlinux"),
            Some("sr_cli -d tools system configuration save")
        );
        assert_eq!(save_command("ceos"), Some("Cli -p 15 -c wr"));
        assert_eq!(save_command("linux"), None);
        assert_eq!(save_command("nokia_srsim"), None);
    }
}
