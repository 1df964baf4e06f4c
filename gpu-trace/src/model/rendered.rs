//! A value with its JSON rendered once.

use serde::Serialize;
use serde_json::value::RawValue;

use crate::text::json;

/// A value with its JSON rendered once: containers and culprits repeat on
/// every event of a busy cgroup, and serializing them anew each time was a
/// large part of the per-event cost.
#[derive(Debug)]
pub struct Rendered<T> {
    value: T,
    json: Box<RawValue>,
}

impl<T: Serialize> Rendered<T> {
    pub fn new(value: T) -> Self {
        let json = json::to_raw(&value);
        Self { value, json }
    }

    /// The value's JSON, as rendered once.
    pub fn json(&self) -> &RawValue {
        &self.json
    }
}

impl<T> std::ops::Deref for Rendered<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T> Serialize for Rendered<T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.json.serialize(serializer)
    }
}
