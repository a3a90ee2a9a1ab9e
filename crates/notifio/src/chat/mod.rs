//! Steering from a chat: what a Telegram chat may ask of the watcher (commands), the buttons
//! under each listing, who may use them, and the Bot API's updates as Notifio reads them.
//!
//! A flat hunter reads Notifio's message on the phone, away from the laptop that runs the
//! dashboard on 127.0.0.1. The bot polls Telegram (`getUpdates`), so nothing on the user's
//! machine is exposed. Everything here is pure: text and updates in, decisions out. Acting on
//! them (marking a listing, writing the config, answering) goes through the same paths as the
//! dashboard, elsewhere.

pub mod command;
pub mod keyboard;
pub mod update;

pub use command::{Command, Resolved, help, parse, resolve};
pub use keyboard::{Press, digest_keyboard, listing_keyboard};
pub use update::{Sender, Update, Updates, allowed};
