package cdb

import (
	"context"
	"fmt"
	"time"
)

// Bootstrapping creates the database and the container the provider needs
// when they are missing, and only then: it reads first, because an account
// may forbid metadata writes with the credential the provider has (an
// Entra ID data-plane role never may create them; an account with
// disableKeyBasedMetadataWriteAccess refuses them with its keys too), and
// such an account must still open a container that exists.

// ensureDatabase creates the configured database unless it exists.
func ensureDatabase(ctx context.Context, client *Client, cfg Config) error {
	_, err := client.ReadDatabase(ctx, cfg.Database)
	if err == nil {
		return nil
	}
	if !IsNotFound(err) {
		return fmt.Errorf("cdb: bootstrap: read database %q: %w", cfg.Database, err)
	}
	if err := client.EnsureDatabase(ctx, cfg.Database); err != nil {
		return fmt.Errorf("cdb: bootstrap: create database %q: %w%s", cfg.Database, err, forbiddenHint(err))
	}
	return nil
}

// createContainer creates the provider's container; created is false when
// another process created it first.
func createContainer(ctx context.Context, container *ContainerClient, cfg Config) (created bool, err error) {
	_, err = container.Create(ctx, ProviderContainerProperties(cfg.Container))
	switch {
	case err == nil:
		return true, nil
	case IsConflict(err):
		return false, nil
	}
	return false, fmt.Errorf("cdb: bootstrap: create container %q in database %q: %w%s", cfg.Container, cfg.Database, err, forbiddenHint(err))
}

// forbiddenHint explains a 403 on creating a database or a container.
func forbiddenHint(err error) string {
	if !isForbidden(err) {
		return ""
	}
	return " (the account refuses to create databases and containers with this credential: an Entra ID " +
		"data-plane role never may, and an account with key-based metadata writes disabled " +
		"(disableKeyBasedMetadataWriteAccess) refuses its keys too. Create them with the definition in " +
		"docs/real-account.md (portal, Azure CLI, ARM or Bicep) and set Config.SkipBootstrap)"
}

// serveWaitRounds bounds waitUntilServing: each round is one read, which
// the client itself retries through 404/1003 for up to its retry budget.
const serveWaitRounds = 4

// waitUntilServing waits until a container just created serves document
// requests: a real account answers 404/1003 (owner resource not found) for
// a moment after creating it, and the provider's first writes must not
// read that as "not found". A point read of an id that never exists
// answers a plain 404 once the container serves.
func waitUntilServing(ctx context.Context, container *ContainerClient, cfg Config) error {
	const probe = "cdb-bootstrap-probe"
	for round := 1; ; round++ {
		_, err := container.ReadItem(ctx, NewPartitionKeyString(probe), probe, nil)
		if err == nil || IsNotFound(err) && !isOwnerNotFound(err) {
			return nil
		}
		if !isOwnerNotFound(err) {
			return fmt.Errorf("cdb: bootstrap: read the new container %q: %w", cfg.Container, err)
		}
		if round == serveWaitRounds {
			return fmt.Errorf("cdb: bootstrap: container %q was created but does not serve requests yet; start again shortly: %w", cfg.Container, err)
		}
		if err := sleep(ctx, time.Second); err != nil {
			return fmt.Errorf("cdb: bootstrap: wait for the new container %q: %w", cfg.Container, err)
		}
	}
}
