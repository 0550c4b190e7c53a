//! Neural-network building blocks. [`functional`] holds the stateless functions layers are made of.

pub mod functional;
