//! Changes to a resource's own settings, as IncrementalAlterConfigs and AlterConfigs ask for
//! them, applied to a copy of its settings: pure, so the controller only checks and stores.

use std::collections::BTreeMap;

/// One change to a resource's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigOp {
    Set(String, String),
    /// Back to the inherited value.
    Delete(String),
    /// Adds values to a list setting (those not in it yet, in order).
    Append(String, String),
    /// Removes values from a list setting.
    Subtract(String, String),
    /// Removes every setting of the resource (AlterConfigs replaces the whole set).
    Clear,
}

/// How a kind of resource checks its settings; the errors are INVALID_CONFIG messages.
pub struct Rules<'a> {
    pub check: &'a dyn Fn(&str, &str) -> Result<(), String>,
    pub check_name: &'a dyn Fn(&str) -> Result<(), String>,
    pub is_list: &'a dyn Fn(&str) -> bool,
    /// The value a setting has when the resource does not set it (the base of an APPEND).
    pub inherited: &'a dyn Fn(&str) -> Option<String>,
}

/// Applies `ops` in order to `settings`; on an error nothing of `ops` should be kept (the
/// caller works on a copy).
pub fn apply(
    settings: &mut BTreeMap<String, String>,
    ops: Vec<ConfigOp>,
    rules: &Rules,
) -> Result<(), String> {
    for op in ops {
        match op {
            ConfigOp::Set(name, value) => {
                (rules.check)(&name, &value)?;
                settings.insert(name, value);
            }
            ConfigOp::Delete(name) => {
                (rules.check_name)(&name)?;
                settings.remove(&name);
            }
            ConfigOp::Clear => settings.clear(),
            ConfigOp::Append(name, _) | ConfigOp::Subtract(name, _) if !(rules.is_list)(&name) => {
                (rules.check_name)(&name)?;
                return Err(format!(
                    "{name} is not a list: APPEND and SUBTRACT apply to lists only"
                ));
            }
            ConfigOp::Append(name, values) => {
                let mut list = current_list(settings, &name, rules);
                for value in split(&values) {
                    if !list.contains(&value) {
                        list.push(value);
                    }
                }
                let joined = list.join(",");
                (rules.check)(&name, &joined)?;
                settings.insert(name, joined);
            }
            ConfigOp::Subtract(name, values) => {
                let removed = split(&values);
                let mut list = current_list(settings, &name, rules);
                list.retain(|v| !removed.contains(v));
                let joined = list.join(",");
                (rules.check)(&name, &joined)?;
                settings.insert(name, joined);
            }
        }
    }
    Ok(())
}

fn split(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
        .collect()
}

fn current_list(settings: &BTreeMap<String, String>, name: &str, rules: &Rules) -> Vec<String> {
    let current = settings
        .get(name)
        .cloned()
        .or_else(|| (rules.inherited)(name))
        .unwrap_or_default();
    split(&current)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules_with<'a>(
        check: &'a dyn Fn(&str, &str) -> Result<(), String>,
        check_name: &'a dyn Fn(&str) -> Result<(), String>,
        is_list: &'a dyn Fn(&str) -> bool,
        inherited: &'a dyn Fn(&str) -> Option<String>,
    ) -> Rules<'a> {
        Rules {
            check,
            check_name,
            is_list,
            inherited,
        }
    }

    fn set(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn append_and_subtract_work_on_lists_from_the_inherited_value() {
        let check = |_: &str, v: &str| {
            if v.is_empty() {
                Err("empty".to_string())
            } else {
                Ok(())
            }
        };
        let check_name = |_: &str| Ok(());
        let is_list = |n: &str| n == "l";
        let inherited = |n: &str| (n == "l").then(|| "a,b".to_string());
        let rules = rules_with(&check, &check_name, &is_list, &inherited);

        let mut s = BTreeMap::new();
        apply(
            &mut s,
            vec![ConfigOp::Append("l".into(), "b,c".into())],
            &rules,
        )
        .unwrap();
        assert_eq!(s, set(&[("l", "a,b,c")]));
        apply(
            &mut s,
            vec![ConfigOp::Subtract("l".into(), "a".into())],
            &rules,
        )
        .unwrap();
        assert_eq!(s, set(&[("l", "b,c")]));
        // A list emptied is checked like any value.
        let mut copy = s.clone();
        let e = apply(
            &mut copy,
            vec![ConfigOp::Subtract("l".into(), "b,c".into())],
            &rules,
        );
        assert_eq!(e, Err("empty".to_string()));
        // Not a list.
        let e = apply(
            &mut s,
            vec![ConfigOp::Append("x".into(), "1".into())],
            &rules,
        );
        assert!(e.unwrap_err().contains("not a list"));
    }

    #[test]
    fn clear_then_set_replaces_the_whole_set() {
        let ok = |_: &str, _: &str| Ok(());
        let ok_name = |_: &str| Ok(());
        let no_list = |_: &str| false;
        let none = |_: &str| None;
        let rules = rules_with(&ok, &ok_name, &no_list, &none);
        let mut s = set(&[("a", "1"), ("b", "2")]);
        apply(
            &mut s,
            vec![ConfigOp::Clear, ConfigOp::Set("c".into(), "3".into())],
            &rules,
        )
        .unwrap();
        assert_eq!(s, set(&[("c", "3")]));
        apply(&mut s, vec![ConfigOp::Delete("c".into())], &rules).unwrap();
        assert!(s.is_empty());
    }
}
