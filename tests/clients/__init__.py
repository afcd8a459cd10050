"""Real clients (substrate-interface, polkadot.js) through chainproxy over chopsticks."""
