//! Authorization: which principal may call which object, interface and method.
//!
//! A policy is decided per connection, not per call. When an object is handed to a
//! connection (resolved by name, handed out as a result or an argument, created, or
//! claimed after a hand-off), the policy is evaluated once for every method
//! of every interface of the object against the connection's principal and roles, and
//! the answer is kept beside the object's handle as a bit per method. A call then costs
//! one bit test, whatever the number of rules.
//!
//! ```ignore
//! let policy = AccessPolicy::deny_by_default()
//!     .role("operators", ["uid:0", "psk:ops"])
//!     .role("users", ["gid:100"])
//!     .allow(Target::object("calc"), ["role:users", "role:operators"])
//!     .deny(Target::object("calc").method("reset"), ["role:users"]);
//! let server = Server::new().with_access(policy);
//! ```
//!
//! **Rules.** A rule names a target (an object by its published name, an interface, a
//! method by name; any part left out matches everything) and who it applies to:
//! principal names (`uid:1000`, `gid:100`, `psk:<key id>`, `cert:<subject>`,
//! `anonymous`), roles (`role:<name>`) or `*` (anyone). Deny rules win over allow rules;
//! a call no rule matches gets the policy's default, which every policy states when it
//! is made ([`AccessPolicy::allow_by_default`] or [`AccessPolicy::deny_by_default`]). A
//! server without a policy lets every authenticated principal call everything it can
//! reach.
//!
//! **Roles** map principals to names, as MTS did: a method sees its caller's roles in
//! its [`crate::CallContext`] and can make finer decisions itself.
//!
//! **What names match.** `gid:N` matches a process's primary group (what `SO_PEERCRED`
//! reports), not its supplementary groups. `cert:<subject>` is the certificate's subject
//! alone, not its issuer: trust one certificate authority of your own for client
//! certificates, or any authority the server trusts can issue a certificate naming any
//! subject. A rule on an interface covers that interface's own methods; the methods of
//! the interfaces it extends are reached through their own interfaces (an object serving
//! `AdminV2: Admin` answers both), so a deny rule meant for both names both. A name that
//! matches nothing (a misspelling, an undefined role) makes [`crate::Server::listen`]
//! fail (see [`AccessPolicy::check`]).
//!
//! A denied call fails with `PermissionDenied` and the connection stays usable. An object
//! of which the principal may call nothing cannot be resolved either (also
//! `PermissionDenied`).

use std::collections::HashMap;
use std::sync::Arc;

use lanner_proto::Principal;

use crate::id::InterfaceId;
use crate::object::Stub;
use crate::proxy::Proxy;

/// What a rule applies to. Parts left out match everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Target {
    object: Option<String>,
    interface: Option<InterfaceId>,
    method: Option<String>,
    /// The interface's name and methods, when it was given by its proxy type: a method
    /// name it lacks is refused by [`AccessPolicy::check`] (the rule would match nothing).
    known: Option<(&'static str, &'static [crate::id::MethodInfo])>,
}

impl Target {
    /// Every object, interface and method.
    pub fn everything() -> Target {
        Target::default()
    }

    /// The object published as `name`.
    pub fn object(name: impl Into<String>) -> Target {
        Target {
            object: Some(name.into()),
            ..Target::default()
        }
    }

    /// Narrows to the interface with id `id`.
    pub fn interface_id(mut self, id: InterfaceId) -> Target {
        self.interface = Some(id);
        self.known = None;
        self
    }

    /// Narrows to the interface whose proxy is `P` (for example `CalculatorProxy`). A
    /// method named in the same target must then be one of `P`'s own (not one of the
    /// interfaces it extends, which are served, and matched, as interfaces of their own):
    /// [`crate::Server::listen`] refuses a policy naming one it lacks.
    pub fn interface<P: Proxy>(self) -> Target {
        let mut target = self.interface_id(P::INTERFACE_ID);
        target.known = Some((P::INTERFACE_NAME, P::METHODS));
        target
    }

    /// Narrows to methods named `name`, as declared (`"type"` for `fn r#type`).
    pub fn method(mut self, name: impl Into<String>) -> Target {
        self.method = Some(name.into());
        self
    }

    /// A method named together with an interface given by its proxy must be one of its
    /// methods: otherwise the rule would match nothing, which in a deny rule is a hole.
    fn check_method(&self) -> Result<(), crate::Error> {
        let (Some(method), Some((interface, methods))) = (&self.method, self.known) else {
            return Ok(());
        };
        if methods.iter().any(|known| known.name == method) {
            return Ok(());
        }
        let names: Vec<&str> = methods.iter().map(|known| known.name).collect();
        Err(crate::Error::new(
            crate::ErrorKind::InvalidArgument,
            format!(
                "access policy: a rule names method {method:?} of {interface}, which has no such method (its own methods: {})",
                names.join(", ")
            ),
        ))
    }

    fn matches(&self, object: Option<&str>, interface: InterfaceId, method: &str) -> bool {
        self.matches_interface(object, interface)
            && self.method.as_deref().is_none_or(|name| name == method)
    }

    /// Whether the rule applies to some method of `interface` of `object`.
    fn matches_interface(&self, object: Option<&str>, interface: InterfaceId) -> bool {
        self.object
            .as_deref()
            .is_none_or(|name| Some(name) == object)
            && self.interface.is_none_or(|id| id == interface)
    }
}

#[derive(Debug, Clone)]
struct Rule {
    target: Target,
    who: Vec<String>,
}

impl Rule {
    fn new<S: Into<String>>(target: Target, who: impl IntoIterator<Item = S>) -> Rule {
        Rule {
            target,
            who: who.into_iter().map(Into::into).collect(),
        }
    }
}

/// Which principals may call what (see the module docs).
#[derive(Debug, Clone)]
pub struct AccessPolicy {
    allow_by_default: bool,
    roles: HashMap<String, Vec<String>>,
    allow: Vec<Rule>,
    deny: Vec<Rule>,
}

impl AccessPolicy {
    /// A policy that allows every call no deny rule forbids.
    pub fn allow_by_default() -> AccessPolicy {
        AccessPolicy::with_default(true)
    }

    /// A policy that denies every call no allow rule permits.
    pub fn deny_by_default() -> AccessPolicy {
        AccessPolicy::with_default(false)
    }

    fn with_default(allow_by_default: bool) -> AccessPolicy {
        AccessPolicy {
            allow_by_default,
            roles: HashMap::new(),
            allow: Vec::new(),
            deny: Vec::new(),
        }
    }

    /// Defines role `name` (or adds to it): its members are principal names (`uid:0`,
    /// `gid:100`, `psk:ops`, `cert:CN=alice`, `anonymous`) or `*` (everyone).
    pub fn role<I, S>(mut self, name: impl Into<String>, members: I) -> AccessPolicy
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.roles
            .entry(name.into())
            .or_default()
            .extend(members.into_iter().map(Into::into));
        self
    }

    /// Allows `who` (principal names, `role:<name>`, or `*`) to call `target`.
    pub fn allow<I, S>(mut self, target: Target, who: I) -> AccessPolicy
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.allow.push(Rule::new(target, who));
        self
    }

    /// Forbids `who` to call `target`, whatever allow rules say.
    pub fn deny<I, S>(mut self, target: Target, who: I) -> AccessPolicy
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.deny.push(Rule::new(target, who));
        self
    }

    /// Checks that every name in the policy means something: each rule's subjects are
    /// principal names (`anonymous`, `uid:N`, `gid:N`, `psk:<key id>`, `cert:<subject>`),
    /// `role:<a defined role>` or `*`, and each role's members principal names or `*`.
    /// A misspelt name would match nobody, which in a deny rule is a hole, so
    /// [`crate::Server::listen`] refuses a policy that fails this.
    pub fn check(&self) -> Result<(), crate::Error> {
        let invalid = |what: String| {
            Err(crate::Error::new(
                crate::ErrorKind::InvalidArgument,
                format!(
                    "access policy: {what}; expected anonymous, uid:N, gid:N, psk:<key id>, cert:<subject>, role:<a defined role> or *"
                ),
            ))
        };
        for (role, members) in &self.roles {
            if let Some(member) = members.iter().find(|m| !is_principal_name(m)) {
                return invalid(format!("role {role:?} has member {member:?}"));
            }
        }
        for rule in self.allow.iter().chain(&self.deny) {
            rule.target.check_method()?;
            for subject in &rule.who {
                let known = match subject.strip_prefix("role:") {
                    Some(role) => self.roles.contains_key(role),
                    None => is_principal_name(subject),
                };
                if !known {
                    return invalid(format!("a rule names {subject:?}"));
                }
            }
        }
        Ok(())
    }

    /// The roles `principal` has, sorted.
    pub fn roles_of(&self, principal: &Principal) -> Vec<String> {
        let mut roles: Vec<String> = self
            .roles
            .iter()
            .filter(|(_, members)| {
                members
                    .iter()
                    .any(|member| member == "*" || principal.is_named(member))
            })
            .map(|(name, _)| name.clone())
            .collect();
        roles.sort();
        roles
    }

    /// Whether `who` of a rule covers the caller.
    fn covers(who: &[String], caller: &Caller<'_>) -> bool {
        who.iter().any(|entry| {
            entry == "*"
                || match entry.strip_prefix("role:") {
                    Some(role) => caller.roles.iter().any(|r| r == role),
                    None => caller.principal.is_named(entry),
                }
        })
    }

    /// Whether the caller may call at least one method of `interface` of `object`, as far
    /// as the policy can tell without the method list: false only if a deny rule covers
    /// the whole interface, or the default denies and no allow rule reaches into it.
    fn may_reach(&self, caller: &Caller<'_>, object: Option<&str>, interface: InterfaceId) -> bool {
        let reaches = |rule: &Rule| {
            rule.target.matches_interface(object, interface) && Self::covers(&rule.who, caller)
        };
        if self
            .deny
            .iter()
            .any(|rule| rule.target.method.is_none() && reaches(rule))
        {
            return false;
        }
        self.allow_by_default || self.allow.iter().any(reaches)
    }

    fn decide(
        &self,
        caller: &Caller<'_>,
        object: Option<&str>,
        interface: InterfaceId,
        method: &str,
    ) -> bool {
        let applies = |rule: &Rule| {
            rule.target.matches(object, interface, method) && Self::covers(&rule.who, caller)
        };
        if self.deny.iter().any(applies) {
            return false;
        }
        self.allow.iter().any(applies) || self.allow_by_default
    }
}

/// Who a connection's peer is, for deciding its calls.
struct Caller<'a> {
    principal: &'a Principal,
    roles: &'a [String],
}

/// The peer of one connection: its principal, roles, and the policy its calls obey.
#[derive(Debug)]
pub(crate) struct PeerIdentity {
    pub(crate) principal: Principal,
    pub(crate) roles: Vec<String>,
    pub(crate) credentials: Option<crate::transport::PeerCredentials>,
    policy: Option<Arc<AccessPolicy>>,
    /// The connection to this peer (set when it starts): where object references in a
    /// call's result are handed out.
    pub(crate) connection: std::sync::Weak<crate::connection::Connection>,
}

impl PeerIdentity {
    /// A peer authenticated as `principal`, obeying `policy` (None: may call everything).
    pub(crate) fn new(
        principal: Principal,
        credentials: Option<crate::transport::PeerCredentials>,
        policy: Option<Arc<AccessPolicy>>,
    ) -> PeerIdentity {
        let roles = policy
            .as_ref()
            .map(|policy| policy.roles_of(&principal))
            .unwrap_or_default();
        PeerIdentity {
            principal,
            roles,
            credentials,
            policy,
            connection: std::sync::Weak::new(),
        }
    }

    /// Whether this peer may call anything of `interface` on an object published as
    /// `object` (None: handed out without a name), decided before the object exists (an
    /// activation is refused before its factory runs).
    pub(crate) fn may_reach(&self, object: Option<&str>, interface: InterfaceId) -> bool {
        let Some(policy) = &self.policy else {
            return true;
        };
        let caller = Caller {
            principal: &self.principal,
            roles: &self.roles,
        };
        policy.may_reach(&caller, object, interface)
    }

    /// What this peer may call on one interface of an object published as `object`
    /// (None: handed out without a name).
    pub(crate) fn access(&self, object: Option<&str>, stub: &dyn Stub) -> MethodAccess {
        let Some(policy) = &self.policy else {
            return MethodAccess::All;
        };
        let caller = Caller {
            principal: &self.principal,
            roles: &self.roles,
        };
        let methods = stub.methods();
        if methods.is_empty() {
            // A marker interface: decided for the interface as a whole.
            return if policy.decide(&caller, object, stub.interface_id(), "") {
                MethodAccess::All
            } else {
                MethodAccess::Some(std::sync::Arc::new([]))
            };
        }
        let mut bits = vec![0u64; methods.len().div_ceil(64)];
        for method in methods {
            let ordinal = usize::from(method.ordinal);
            if ordinal < methods.len()
                && policy.decide(&caller, object, stub.interface_id(), method.name)
            {
                bits[ordinal / 64] |= 1 << (ordinal % 64);
            }
        }
        let allowed = bits
            .iter()
            .map(|word| word.count_ones() as usize)
            .sum::<usize>();
        if allowed == methods.len() {
            MethodAccess::All
        } else {
            MethodAccess::Some(bits.into())
        }
    }
}

/// Which methods of one interface of one exported object the peer may call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MethodAccess {
    /// Every method.
    All,
    /// The methods whose ordinal's bit is set (shared: cloned for each call).
    Some(std::sync::Arc<[u64]>),
}

impl MethodAccess {
    /// Whether the method with this ordinal may be called.
    pub(crate) fn allows(&self, ordinal: u16) -> bool {
        match self {
            MethodAccess::All => true,
            MethodAccess::Some(bits) => {
                let ordinal = usize::from(ordinal);
                bits.get(ordinal / 64)
                    .is_some_and(|word| word & (1 << (ordinal % 64)) != 0)
            }
        }
    }

    /// Whether no method at all may be called.
    pub(crate) fn is_none(&self) -> bool {
        matches!(self, MethodAccess::Some(bits) if bits.iter().all(|word| *word == 0))
    }
}

/// Whether `name` is `*` or a name some principal could have (see [`Principal::names`]):
/// numbers written plainly (no sign, no leading zeros), a key id a key could have, a
/// certificate subject of at least one attribute.
fn is_principal_name(name: &str) -> bool {
    let canonical_number = |n: &str| n.parse::<u32>().is_ok_and(|v| v.to_string() == n);
    if name == "*" || name == "anonymous" {
        return true;
    }
    if let Some(n) = name
        .strip_prefix("uid:")
        .or_else(|| name.strip_prefix("gid:"))
    {
        return canonical_number(n);
    }
    if let Some(id) = name.strip_prefix("psk:") {
        return lanner_proto::auth::psk::check_key_id(id).is_ok();
    }
    if let Some(subject) = name.strip_prefix("cert:") {
        return subject.contains('=');
    }
    false
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_policy_whose_names_mean_nothing_fails_its_check() {
        use super::{AccessPolicy, Target};
        let fine = AccessPolicy::deny_by_default()
            .role(
                "ops",
                ["uid:0", "psk:ops", "cert:CN=alice", "anonymous", "*"],
            )
            .allow(Target::everything(), ["role:ops", "gid:100"])
            .deny(Target::object("vault"), ["uid:1000"]);
        assert!(fine.check().is_ok());
        for subject in [
            "user:1000",
            "uid:007",
            "uid:+0",
            "cert:alice",
            "role:admns",
            "psk:",
        ] {
            let policy = AccessPolicy::allow_by_default()
                .role("admins", ["uid:0"])
                .deny(Target::everything(), [subject]);
            let error = policy.check().unwrap_err();
            assert_eq!(error.kind(), crate::ErrorKind::InvalidArgument, "{error}");
            assert!(error.message().contains(subject), "{error}");
        }
        let policy = AccessPolicy::allow_by_default().role("admins", ["root"]);
        assert!(policy.check().unwrap_err().message().contains("\"root\""));
    }

    use super::*;

    fn process(uid: u32, gid: u32) -> Principal {
        Principal::Process { uid, gid, pid: 1 }
    }

    const CALC: InterfaceId = InterfaceId::from_u128(1);
    const ADMIN: InterfaceId = InterfaceId::from_u128(2);

    fn decide(
        policy: &AccessPolicy,
        principal: &Principal,
        object: &str,
        iface: InterfaceId,
        method: &str,
    ) -> bool {
        let roles = policy.roles_of(principal);
        let caller = Caller {
            principal,
            roles: &roles,
        };
        policy.decide(&caller, Some(object), iface, method)
    }

    #[test]
    fn the_default_applies_when_no_rule_matches() {
        let alice = process(1000, 100);
        assert!(decide(
            &AccessPolicy::allow_by_default(),
            &alice,
            "calc",
            CALC,
            "add"
        ));
        assert!(!decide(
            &AccessPolicy::deny_by_default(),
            &alice,
            "calc",
            CALC,
            "add"
        ));
    }

    #[test]
    fn roles_map_principals_and_rules_name_roles() {
        let policy = AccessPolicy::deny_by_default()
            .role("users", ["gid:100"])
            .role("operators", ["uid:0", "psk:ops"])
            .allow(Target::object("calc").interface_id(CALC), ["role:users"])
            .allow(Target::everything(), ["role:operators"]);
        let alice = process(1000, 100);
        let mallory = process(1001, 200);
        let ops = Principal::Key("ops".into());
        assert_eq!(policy.roles_of(&alice), vec!["users"]);
        assert_eq!(policy.roles_of(&ops), vec!["operators"]);
        assert!(policy.roles_of(&mallory).is_empty());
        assert!(decide(&policy, &alice, "calc", CALC, "add"));
        assert!(!decide(&policy, &alice, "calc", ADMIN, "reset"));
        assert!(!decide(&policy, &alice, "other", CALC, "add"));
        assert!(!decide(&policy, &mallory, "calc", CALC, "add"));
        assert!(decide(&policy, &ops, "other", ADMIN, "reset"));
    }

    #[test]
    fn deny_rules_win_over_allow_rules() {
        let policy = AccessPolicy::allow_by_default()
            .allow(Target::everything(), ["*"])
            .deny(Target::object("calc").method("reset"), ["uid:1000"]);
        let alice = process(1000, 100);
        assert!(decide(&policy, &alice, "calc", CALC, "add"));
        assert!(!decide(&policy, &alice, "calc", CALC, "reset"));
        assert!(decide(&policy, &process(7, 7), "calc", CALC, "reset"));
    }

    /// An interface without methods (a marker).
    struct Marker;

    impl Stub for Marker {
        fn interface_id(&self) -> InterfaceId {
            ADMIN
        }

        fn interface_name(&self) -> &'static str {
            "Marker"
        }

        fn methods(&self) -> &'static [crate::id::MethodInfo] {
            &[]
        }

        fn dispatch(&self, _call: crate::call::IncomingCall<'_>) -> crate::object::DispatchFuture {
            unreachable!("a marker has no methods to call")
        }
    }

    #[test]
    fn a_marker_interface_is_decided_as_a_whole() {
        let alice = process(1000, 100);
        let deny = Arc::new(AccessPolicy::deny_by_default());
        let denied = PeerIdentity::new(alice.clone(), None, Some(deny)).access(Some("m"), &Marker);
        assert!(denied.is_none());
        let allow = Arc::new(AccessPolicy::deny_by_default().allow(Target::object("m"), ["*"]));
        let allowed = PeerIdentity::new(alice, None, Some(allow)).access(Some("m"), &Marker);
        assert_eq!(allowed, MethodAccess::All);
    }

    #[test]
    fn method_access_is_a_bit_per_ordinal() {
        let some = MethodAccess::Some(vec![0b101, 1].into());
        assert!(some.allows(0) && !some.allows(1) && some.allows(2) && some.allows(64));
        assert!(!some.allows(65) && !some.allows(1000));
        assert!(!some.is_none());
        assert!(MethodAccess::Some(vec![0].into()).is_none());
        assert!(MethodAccess::All.allows(u16::MAX) && !MethodAccess::All.is_none());
    }

    #[test]
    fn reaching_an_interface_is_decided_before_its_methods_are_known() {
        let alice = process(1000, 100);
        let reach = |policy: &AccessPolicy, iface| {
            PeerIdentity::new(alice.clone(), None, Some(Arc::new(policy.clone())))
                .may_reach(None, iface)
        };
        let open = AccessPolicy::allow_by_default();
        assert!(reach(&open, CALC));
        // A deny of one method leaves the rest of the interface.
        let one_method = open.clone().deny(
            Target::everything().interface_id(CALC).method("reset"),
            ["*"],
        );
        assert!(reach(&one_method, CALC));
        let whole = open.deny(Target::everything().interface_id(CALC), ["uid:1000"]);
        assert!(!reach(&whole, CALC));
        assert!(reach(&whole, ADMIN));
        // Closed by default: one allowed method reaches in.
        let closed = AccessPolicy::deny_by_default().allow(
            Target::everything().interface_id(ADMIN).method("status"),
            ["uid:1000"],
        );
        assert!(reach(&closed, ADMIN));
        assert!(!reach(&closed, CALC));
    }
}
