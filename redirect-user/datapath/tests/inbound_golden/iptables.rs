//! A small evaluator of an iptables-restore nat table: enough of `-A`/`-I`, `-p`, `--dport`,
//! `-i`, `-s`/`-d` (with `!`), `-j RETURN|ACCEPT|REDIRECT|<chain>` and `--to-ports` to walk
//! istio's `PREROUTING` -> `ISTIO_INBOUND` -> `ISTIO_IN_REDIRECT` chains for one packet. Any
//! other match met on the way fails the test rather than being ignored.
use std::collections::HashMap;
use std::net::IpAddr;

use ipnet::IpNet;

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Match {
    Proto(String),
    Dport(u16),
    In(String),
    Src(IpNet),
    Dst(IpNet),
    /// Anything this evaluator does not model: reaching it fails the test.
    Unknown(String),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Target {
    Return,
    Accept,
    Jump(String),
    Redirect(u16),
}

#[derive(Debug, Clone)]
pub(crate) struct Rule {
    pub text: String,
    pub matches: Vec<(bool, Match)>,
    pub target: Target,
}

fn parse_rule(text: &str, tokens: &[&str]) -> Rule {
    let (mut matches, mut target, mut negate, mut i) = (Vec::new(), None, false, 0);
    let arg = |i: usize| {
        *tokens
            .get(i + 1)
            .unwrap_or_else(|| panic!("{text}: value missing"))
    };
    let net = |s: &str| -> IpNet {
        s.parse()
            .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
            .unwrap_or_else(|e| panic!("{text}: {s}: {e}"))
    };
    while i < tokens.len() {
        let m = match tokens[i] {
            "!" => {
                negate = true;
                i += 1;
                continue;
            }
            "-p" => Match::Proto(arg(i).to_owned()),
            "--dport" => Match::Dport(arg(i).parse().expect("port")),
            "-i" => Match::In(arg(i).to_owned()),
            "-s" => Match::Src(net(arg(i))),
            "-d" => Match::Dst(net(arg(i))),
            "-j" => {
                target = Some(match arg(i) {
                    "RETURN" => Target::Return,
                    "ACCEPT" => Target::Accept,
                    "REDIRECT" => Target::Redirect(0),
                    chain => Target::Jump(chain.to_owned()),
                });
                i += 2;
                continue;
            }
            "--to-ports" | "--to-port" => {
                target = Some(Target::Redirect(arg(i).parse().expect("port")));
                i += 2;
                continue;
            }
            other => Match::Unknown(other.to_owned()),
        };
        i += if matches!(m, Match::Unknown(_)) { 1 } else { 2 };
        matches.push((std::mem::take(&mut negate), m));
    }
    let target = target.unwrap_or_else(|| panic!("{text}: no -j"));
    assert_ne!(
        target,
        Target::Redirect(0),
        "{text}: REDIRECT without --to-ports"
    );
    Rule {
        text: text.to_owned(),
        matches,
        target,
    }
}

/// The nat table of one iptables-restore half, as chains of rules in their final order.
pub(crate) fn nat_chains(half: &str) -> HashMap<String, Vec<Rule>> {
    let mut chains: HashMap<String, Vec<Rule>> = HashMap::new();
    let mut inside = false;
    for line in half.lines() {
        match line {
            "* nat" => inside = true,
            "COMMIT" => inside = false,
            _ if !inside => {}
            _ => {
                let tokens: Vec<&str> = line.split_whitespace().collect();
                match tokens.as_slice() {
                    ["-A", chain, rest @ ..] => chains
                        .entry((*chain).to_owned())
                        .or_default()
                        .push(parse_rule(line, rest)),
                    ["-I", chain, pos, rest @ ..] => {
                        let list = chains.entry((*chain).to_owned()).or_default();
                        let at = pos.parse::<usize>().expect("rule number") - 1;
                        list.insert(at, parse_rule(line, rest));
                    }
                    ["-N", ..] | [] => {}
                    _ if line.starts_with(':') || line.starts_with('#') => {}
                    _ => panic!("unexpected nat line: {line}"),
                }
            }
        }
    }
    chains
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Packet<'a> {
    pub tcp: bool,
    pub src: IpAddr,
    pub dst: IpAddr,
    pub dport: u16,
    pub iface: &'a str,
}

fn matches(rule: &Rule, p: &Packet) -> bool {
    rule.matches.iter().all(|(negate, m)| {
        let hit = match m {
            Match::Proto(proto) => proto == if p.tcp { "tcp" } else { "udp" },
            // --dport needs -p tcp/udp first; both rules of the goldens have it.
            Match::Dport(port) => p.dport == *port,
            Match::In(iface) => iface == p.iface,
            Match::Src(net) => net.contains(&p.src),
            Match::Dst(net) => net.contains(&p.dst),
            Match::Unknown(token) => panic!("unmodelled match {token} in: {}", rule.text),
        };
        hit != *negate
    })
}

/// Where a packet ends after a chain walk: a REDIRECT's port (`None`: left alone), and the
/// last rule that decided or returned (`None`: no rule matched that ends a walk).
pub(crate) type Landing<'r> = (Option<u16>, Option<&'r Rule>);

/// Walks `chain`; `Err` carries the landing once a rule ended the walk, `Ok` means the chain
/// ran out or returned (with the RETURN rule) and the caller goes on.
fn walk<'r>(
    chains: &'r HashMap<String, Vec<Rule>>,
    chain: &str,
    p: &Packet,
    depth: u32,
    why: &mut Option<&'r Rule>,
) -> Result<(), Landing<'r>> {
    assert!(depth < 8, "jump loop at {chain}");
    for rule in chains.get(chain).map(Vec::as_slice).unwrap_or(&[]) {
        if !matches(rule, p) {
            continue;
        }
        match &rule.target {
            Target::Return if depth == 0 => return Err((None, Some(rule))),
            Target::Return => {
                *why = Some(rule);
                return Ok(());
            }
            Target::Accept => return Err((None, Some(rule))),
            Target::Redirect(port) => return Err((Some(*port), Some(rule))),
            Target::Jump(next) => walk(chains, next, p, depth + 1, why)?,
        }
    }
    Ok(())
}

/// The nat PREROUTING verdict for `p`.
pub(crate) fn prerouting<'r>(chains: &'r HashMap<String, Vec<Rule>>, p: &Packet) -> Landing<'r> {
    let mut why = None;
    match walk(chains, "PREROUTING", p, 0, &mut why) {
        Ok(()) => (None, why),
        Err(landing) => landing,
    }
}
