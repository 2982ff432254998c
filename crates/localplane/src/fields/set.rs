//! A set of field paths, stored as a trie: what one manager owns, and what a write added,
//! changed or removed. Serialised as `FieldsV1`, where a step that is itself in the set and also
//! has members below it carries a `.` entry.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use super::path::Pe;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSet {
    members: BTreeSet<Pe>,
    /// Never holds an empty set.
    children: BTreeMap<Pe, FieldSet>,
}

impl FieldSet {
    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.children.is_empty()
    }

    pub fn insert(&mut self, path: &[Pe]) {
        match path {
            [] => {}
            [last] => {
                self.members.insert(last.clone());
            }
            [first, rest @ ..] => self.children.entry(first.clone()).or_default().insert(rest),
        }
    }

    pub fn insert_member(&mut self, pe: Pe) {
        self.members.insert(pe);
    }

    /// Attaches `child` under `pe` (dropping it if empty).
    pub fn insert_child(&mut self, pe: Pe, child: FieldSet) {
        if child.is_empty() {
            return;
        }
        match self.children.get_mut(&pe) {
            Some(c) => *c = c.union(&child),
            None => {
                self.children.insert(pe, child);
            }
        }
    }

    /// Whether `path` itself is in the set.
    #[cfg(test)]
    pub fn has(&self, path: &[Pe]) -> bool {
        match path {
            [] => false,
            [last] => self.members.contains(last),
            [first, rest @ ..] => self.children.get(first).is_some_and(|c| c.has(rest)),
        }
    }

    pub fn is_member(&self, pe: &Pe) -> bool {
        self.members.contains(pe)
    }

    /// The paths below `pe`, relative to it.
    pub fn child(&self, pe: &Pe) -> Option<&FieldSet> {
        self.children.get(pe)
    }

    pub fn members(&self) -> impl Iterator<Item = &Pe> {
        self.members.iter()
    }

    pub fn children(&self) -> impl Iterator<Item = (&Pe, &FieldSet)> {
        self.children.iter()
    }

    pub fn union(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        out.members.extend(other.members.iter().cloned());
        for (pe, c) in &other.children {
            out.insert_child(pe.clone(), c.clone());
        }
        out
    }

    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let members = self.members.difference(&other.members).cloned().collect();
        let mut children = BTreeMap::new();
        for (pe, c) in &self.children {
            let d = match other.children.get(pe) {
                Some(o) => c.difference(o),
                None => c.clone(),
            };
            if !d.is_empty() {
                children.insert(pe.clone(), d);
            }
        }
        FieldSet { members, children }
    }

    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let members = self.members.intersection(&other.members).cloned().collect();
        let mut children = BTreeMap::new();
        for (pe, c) in &self.children {
            if let Some(o) = other.children.get(pe) {
                let i = c.intersection(o);
                if !i.is_empty() {
                    children.insert(pe.clone(), i);
                }
            }
        }
        FieldSet { members, children }
    }

    /// Every path in the set, in the order structured-merge-diff iterates them: the members at
    /// a level, then each child's paths.
    pub fn paths(&self) -> Vec<Vec<Pe>> {
        let mut out = Vec::new();
        self.collect(&mut Vec::new(), &mut out);
        out
    }

    fn collect(&self, prefix: &mut Vec<Pe>, out: &mut Vec<Vec<Pe>>) {
        for m in &self.members {
            let mut p = prefix.clone();
            p.push(m.clone());
            out.push(p);
        }
        for (pe, c) in &self.children {
            prefix.push(pe.clone());
            c.collect(prefix, out);
            prefix.pop();
        }
    }

    /// Keeps only what `keep` accepts at the top level (whole subtrees).
    pub fn retain_top(&mut self, keep: impl Fn(&Pe) -> bool) {
        self.members.retain(&keep);
        self.children.retain(|pe, _| keep(pe));
    }

    /// Removes a path's member entry (not what is below it).
    pub fn remove(&mut self, path: &[Pe]) {
        match path {
            [] => {}
            [last] => {
                self.members.remove(last);
            }
            [first, rest @ ..] => {
                if let Some(c) = self.children.get_mut(first) {
                    c.remove(rest);
                    if c.is_empty() {
                        self.children.remove(first);
                    }
                }
            }
        }
    }

    pub fn to_fields_v1(&self) -> Value {
        Value::Object(self.emit(false))
    }

    fn emit(&self, with_self: bool) -> Map<String, Value> {
        let mut m = Map::new();
        if with_self {
            m.insert(".".into(), json!({}));
        }
        for pe in &self.members {
            if !self.children.contains_key(pe) {
                m.insert(pe.to_key(), json!({}));
            }
        }
        for (pe, c) in &self.children {
            m.insert(
                pe.to_key(),
                Value::Object(c.emit(self.members.contains(pe))),
            );
        }
        m
    }

    pub fn from_fields_v1(v: &Value) -> Result<FieldSet, String> {
        let Value::Object(m) = v else {
            return Err("FieldsV1 must be a JSON object".into());
        };
        let mut out = FieldSet::default();
        for (k, child) in m {
            if k == "." {
                continue;
            }
            let pe = Pe::from_key(k)?;
            let Value::Object(cm) = child else {
                return Err(format!("the value under {k:?} must be an object"));
            };
            if cm.is_empty() || cm.contains_key(".") {
                out.members.insert(pe.clone());
            }
            let sub = FieldSet::from_fields_v1(child)?;
            out.insert_child(pe, sub);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Vec<Pe> {
        s.split('.').map(Pe::field).collect()
    }

    #[test]
    fn fields_v1_marks_a_member_with_children_by_a_dot() {
        let mut s = FieldSet::default();
        s.insert(&p("metadata.labels"));
        s.insert(&p("metadata.labels.app"));
        s.insert(&p("spec.size"));
        let v = s.to_fields_v1();
        assert_eq!(
            v,
            json!({"f:metadata": {"f:labels": {".": {}, "f:app": {}}}, "f:spec": {"f:size": {}}})
        );
        assert_eq!(FieldSet::from_fields_v1(&v).unwrap(), s);
        assert!(FieldSet::from_fields_v1(&json!({"f:a": 1})).is_err());
        assert!(FieldSet::from_fields_v1(&json!({"q:a": {}})).is_err());
    }

    #[test]
    fn set_algebra() {
        let mut a = FieldSet::default();
        a.insert(&p("spec.a"));
        a.insert(&p("spec.b"));
        let mut b = FieldSet::default();
        b.insert(&p("spec.b"));
        b.insert(&p("spec.c"));
        assert_eq!(a.intersection(&b).paths(), vec![p("spec.b")]);
        assert_eq!(a.difference(&b).paths(), vec![p("spec.a")]);
        assert_eq!(a.union(&b).paths().len(), 3);
        assert!(a.difference(&a).is_empty());
        assert!(a.has(&p("spec.a")) && !a.has(&p("spec")));
    }
}
