//! What many task events of one report share, sent once per report and named by index
//! (`TaskEvent.shape`, `TaskEvent.place`): the function a thousand tasks ran and the worker
//! they ran on cost a thousand lookups, not a thousand copies of the same strings.

use oxray_proto::v1;
use oxray_types::ResourceSet;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

/// What a task's submission says of it, borrowed from its spec.
pub struct Shape<'a> {
    pub name: &'a str,
    /// NORMAL_TASK, ACTOR_CREATION_TASK or ACTOR_TASK.
    pub kind: &'static str,
    pub actor_id: &'a str,
    pub placement_group_id: &'a str,
    /// As asked for: amounts of 0 (an actor's CPU) are not shown.
    pub resources: &'a ResourceSet,
}

impl Shape<'_> {
    fn asked(&self) -> impl Iterator<Item = (&str, f64)> {
        self.resources.iter().filter(|(_, amount)| *amount > 0.0)
    }

    fn key(&self) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (self.name, self.kind, self.actor_id, self.placement_group_id).hash(&mut h);
        for (name, amount) in self.asked() {
            (name, amount.to_bits()).hash(&mut h);
        }
        h.finish()
    }

    fn is(&self, sent: &v1::TaskShape) -> bool {
        sent.name == self.name
            && sent.kind == self.kind
            && sent.actor_id == self.actor_id
            && sent.placement_group_id == self.placement_group_id
            && sent.required_resources.len() == self.asked().count()
            && self.asked().all(|(name, amount)| sent.required_resources.get(name) == Some(&amount))
    }

    /// The shape written out, for a report's table or for an event of its own.
    pub fn to_proto(&self) -> v1::TaskShape {
        v1::TaskShape {
            name: self.name.to_string(),
            kind: self.kind.to_string(),
            actor_id: self.actor_id.to_string(),
            placement_group_id: self.placement_group_id.to_string(),
            required_resources: asked(self.resources),
        }
    }
}

/// Resources as the state API shows them: what is asked for (an actor's 0 CPU is not).
pub fn asked(resources: &ResourceSet) -> HashMap<String, f64> {
    resources.iter().filter(|(_, amount)| *amount > 0.0).map(|(name, amount)| (name.to_string(), amount)).collect()
}

/// The shapes and places of one report.
#[derive(Default)]
pub struct Names {
    shapes: Vec<v1::TaskShape>,
    shape_at: HashMap<u64, u32>,
    places: Vec<v1::TaskPlace>,
    /// By worker id.
    place_at: HashMap<String, u32>,
}

impl Names {
    /// `TaskEvent.shape` for `shape` (1 + its index); `None` in the unlikely case that
    /// another shape has the same hash: the event then carries it itself.
    pub fn shape(&mut self, shape: &Shape) -> Option<u32> {
        let key = shape.key();
        match self.shape_at.get(&key) {
            Some(&at) => shape.is(&self.shapes[at as usize - 1]).then_some(at),
            None => {
                self.shapes.push(shape.to_proto());
                let at = self.shapes.len() as u32;
                self.shape_at.insert(key, at);
                Some(at)
            }
        }
    }

    /// `TaskEvent.place` for a worker (1 + its index).
    pub fn place(&mut self, node_id: &str, worker_id: &str, worker_pid: u32) -> u32 {
        if let Some(&at) = self.place_at.get(worker_id) {
            return at;
        }
        let place = v1::TaskPlace { node_id: node_id.to_string(), worker_id: worker_id.to_string(), worker_pid };
        self.places.push(place);
        let at = self.places.len() as u32;
        self.place_at.insert(worker_id.to_string(), at);
        at
    }

    /// The tables of the report being sent; the next report starts new ones.
    pub fn take(&mut self) -> (Vec<v1::TaskShape>, Vec<v1::TaskPlace>) {
        self.shape_at.clear();
        self.place_at.clear();
        (std::mem::take(&mut self.shapes), std::mem::take(&mut self.places))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resources(cpu: f64) -> ResourceSet {
        let mut r = ResourceSet::new();
        r.set("CPU", cpu).unwrap();
        r.set("memory", 0.0).unwrap();
        r
    }

    #[test]
    fn equal_shapes_and_workers_are_sent_once_per_report() {
        let (one, two) = (resources(1.0), resources(2.0));
        let f = |resources| Shape { name: "f", kind: "NORMAL_TASK", actor_id: "", placement_group_id: "", resources };
        let mut names = Names::default();
        assert_eq!(names.shape(&f(&one)), Some(1));
        assert_eq!(names.shape(&f(&two)), Some(2), "other resources are another shape");
        assert_eq!(names.shape(&f(&one)), Some(1));
        assert_eq!((names.place("n", "w1", 7), names.place("n", "w2", 8), names.place("n", "w1", 7)), (1, 2, 1));
        let (shapes, places) = names.take();
        assert_eq!(shapes.len(), 2);
        assert_eq!(shapes[0].required_resources, [("CPU".to_string(), 1.0)].into(), "amounts of 0 are left out");
        assert_eq!((places[1].worker_id.as_str(), places[1].worker_pid), ("w2", 8));
        assert_eq!(names.shape(&f(&two)), Some(1), "a new report starts new tables");
    }

    #[test]
    fn a_shape_is_compared_not_only_hashed() {
        let one = resources(1.0);
        let shape = Shape { name: "f", kind: "ACTOR_TASK", actor_id: "a", placement_group_id: "", resources: &one };
        let mut names = Names::default();
        names.shape_at.insert(shape.key(), 1);
        names.shapes.push(v1::TaskShape { name: "g".into(), ..Default::default() });
        assert_eq!(names.shape(&shape), None);
    }
}
