/**
 * The fixed workspace of bench/mcp-session.ts: two Spaces (`eng`, `product`) of 13 pages
 * with headings, links between them (markdown and wiki), tags and a `::: confidential` block in
 * each Space, plus the texts the scripted session writes. Fixed text only: the token figures of
 * a run depend on nothing else the script controls.
 */

export interface SeedSpace {
  id: string;
  name: string;
  summary: string;
}

export interface SeedPage {
  path: string;
  content: string;
}

export const SPACES: SeedSpace[] = [
  { id: 'eng', name: 'Engineering', summary: 'Runbooks, architecture notes and decisions of the platform and payments teams.' },
  { id: 'product', name: 'Product', summary: 'Roadmap, pricing, specs and customer research.' },
];

const DEPLOY_PAYMENTS = `---
title: Deploying the payments service
tags: [ops, deploy, payments]
owner: team-payments
---
# Deploying the payments service

The payments service ships from \`main\` through the release pipeline twice a week, Tuesdays and
Thursdays before 15:00 UTC. A deploy outside that window needs a second approver from the
payments team.

## Before you start

- Check the [event bus dashboard](../architecture/event-bus.md) shows no consumer lag above 30 s.
- Make sure nobody holds the \`payments-deploy\` lock in the release channel.
- Read [[incident-response]] if this is your first deploy.

## Steps

1. Tag the release: \`make release VERSION=x.y.z\`.
2. Start the pipeline; it runs the migrations in a separate job first.
3. Watch the canary (5% of traffic) for ten minutes: error rate below 0.5%, p99 below 400 ms.
4. Promote to all regions one at a time, EU first.

| Stage | Owner | Budget |
|---|---|---|
| canary | payments | 10 min |
| rollout | payments | 30 min |

## Rollback

Run \`make rollback\` from the release channel; it redeploys the previous tag and keeps the
schema (every migration is backwards compatible for one release, see
[the Postgres 16 decision](../decisions/2025-11-postgres-16.md)). If the rollback fails, page
the on-call engineer and follow [the database failover runbook](database-failover.md).

::: confidential
Escalation bridge: +1 415 555 0142, PIN 7731. Card network contact: ops-desk@acquirer.example.
:::

## Contacts

Team payments (#payments), on call as in [[on-call]].
`;

const INCIDENT_RESPONSE = `---
title: Incident response
tags: [ops, incident]
---
# Incident response

Anyone can declare an incident. Declaring early is cheap; a late declaration is not.

## Declare

Post \`/incident declare\` in #incidents with one line on the impact. The bot opens a channel and
a timeline document and pages the incident commander on duty.

## Roles

- **Incident commander**: runs the call, decides, keeps the timeline.
- **Operations lead**: changes production; nobody else does.
- **Communications**: status page every 30 minutes, customer success in the loop.

## Severity

| Severity | Meaning | Update cadence |
|---|---|---|
| SEV1 | Payments failing or data at risk | 15 min |
| SEV2 | Degraded, workaround exists | 30 min |
| SEV3 | Minor, one customer or internal only | daily |

## After

A blameless review within five working days, written up under eng/decisions when it changes how
we work. See [[on-call]] for hand-over.
`;

const DATABASE_FAILOVER = `---
title: Database failover
tags: [ops, database, postgres]
---
# Database failover

The primary Postgres cluster runs in eu-west with a synchronous replica in a second zone and an
asynchronous one in us-east.

## When to fail over

Only when the primary is unreachable for more than two minutes or the incident commander asks
for it. Replication lag above 10 s on the synchronous replica is a SEV2 on its own.

## Steps

1. Freeze deploys (\`/freeze payments\`).
2. Promote the synchronous replica: \`pgctl promote --cluster payments-eu\`.
3. Point the \`payments-db\` DNS record at it; TTL is 30 s.
4. Check the payments service reconnects (connection errors fall to zero within a minute).

## Afterwards

Rebuild the old primary as a replica before unfreezing. Record the failover in the incident
timeline; see [Incident response](incident-response.md).
`;

const PAYMENTS_SERVICE = `---
title: Payments service
tags: [architecture, payments]
---
# Payments service

Takes payment intents from checkout, talks to the card acquirer and records every state change
as an event on the [event bus](event-bus.md).

## Components

- **api**: REST for checkout and the dashboard, stateless, 6 replicas.
- **worker**: retries acquirer calls with exponential backoff (max 5 attempts).
- **ledger**: double-entry ledger in Postgres; the only writer of balances.

## Data

Postgres 16 (see [the decision](../decisions/2025-11-postgres-16.md)); card data never touches
our systems, only acquirer tokens.

## Deploys

See [[deploy-payments]] for the release process and rollback.
`;

const EVENT_BUS = `---
title: Event bus
tags: [architecture, events]
---
# Event bus

Kafka, three brokers per region, topics per domain (\`payments.*\`, \`billing.*\`, \`accounts.*\`).

## Conventions

- Events are past tense facts: \`payment.captured\`, never \`capture.payment\`.
- Every event carries \`occurred_at\`, \`trace_id\` and a schema version.
- Consumers are idempotent; the bus delivers at least once.

## Lag

Consumer lag above 30 s alerts the owning team. The dashboard is linked from
[the payments deploy runbook](../runbooks/deploy-payments.md).
`;

const POSTGRES_16 = `---
title: 'Decision: move to Postgres 16'
tags: [decision, database]
status: accepted
---
# Decision: move to Postgres 16

Accepted November 2025.

## Context

Postgres 13 leaves support in 2025 and logical replication in 16 lets us fail over with less
lag.

## Decision

Upgrade all clusters to 16 by the end of Q1 2026, payments last. Every migration stays backwards
compatible for one release so a rollback never needs a schema change.

## Consequences

Two weeks of dual running per cluster; the failover runbook changes (see
[Database failover](../runbooks/database-failover.md)).
`;

const FEATURE_FLAGS = `---
title: 'Decision: feature flags for risky changes'
tags: [decision, deploy]
status: accepted
---
# Decision: feature flags for risky changes

Accepted January 2026.

## Context

Two rollbacks in Q4 were for changes that could have been switched off instead.

## Decision

Changes to checkout, pricing or the ledger ship behind a flag, default off, and are turned on per
region after the deploy. Flags older than 60 days are removed.

## Consequences

The deploy runbook's canary step watches the flag's cohort too.
`;

const ON_CALL = `---
title: On call
tags: [ops, onboarding]
---
# On call

One primary and one secondary per week, hand-over on Mondays at 10:00 local time.

## Before your first week

- Shadow one week as secondary.
- Run a failover drill with the database team.
- Read [[incident-response]] and [[deploy-payments]].

## Hand-over

Write open issues, running incidents and anything flaky into the hand-over note in #on-call.
`;

const ROADMAP = `---
title: Roadmap 2026
tags: [roadmap, planning]
---
# Roadmap 2026

## Q1

- Usage-based billing for the API plan (see [the spec](specs/usage-billing.md)).
- Self-serve plan changes in the dashboard.

## Q2

- Invoices in local currency for EU customers.
- Team seats on the Pro plan.

## Open questions

- Do we keep the Starter plan once usage billing ships?
- Which regions get local currency first after the EU?
`;

const PRICING = `---
title: Pricing
tags: [pricing, plans]
---
# Pricing

## Plans

| Plan | Price | Included |
|---|---|---|
| Starter | $0 | 1,000 API calls a month |
| Pro | $49 a month | 100,000 API calls, 5 seats |
| Enterprise | custom | SSO, audit log, support plan |

## Discounts

Annual billing takes 15% off Pro. Non-profits get Pro at half price on request.

::: confidential
Sales may go to 35% off Enterprise list without approval; deeper discounts need the CFO.
:::

## Changes

Price changes are announced 60 days ahead by email and on the pricing page.
`;

const INTERVIEWS = `---
title: Customer interviews Q1 2026
tags: [research, customers]
---
# Customer interviews Q1 2026

Twelve interviews with Pro and Enterprise customers in January and February.

## Findings

- Eight of twelve want to pay for usage rather than seats.
- Finance teams ask for invoices in their own currency.
- Nobody used the Starter plan's export.

## Quotes

> "We would move to usage billing tomorrow if we could cap the monthly amount."

## Next

Feed the findings into [the usage billing spec](../specs/usage-billing.md) and the
[roadmap](../roadmap-2026.md).
`;

const USAGE_BILLING = `---
title: 'Spec: usage-based billing'
tags: [spec, billing, payments]
status: draft
---
# Spec: usage-based billing

## Goal

Charge the API plan per call, with a monthly cap the customer sets.

## Metering

The API gateway emits \`usage.recorded\` events on the [event bus](../../eng/architecture/event-bus.md);
the billing worker aggregates them per customer per hour.

## Invoicing

At the end of the month the payments service (see
[its architecture](../../eng/architecture/payments-service.md)) charges the aggregated amount, never
more than the cap.

## Open questions

- How do we show usage in the dashboard before the invoice?
`;

const STARTER_EXPORT = `---
title: 'Spec: CSV export on the Starter plan'
tags: [spec, starter]
status: shipped
---
# Spec: CSV export on the Starter plan

Shipped in 2024. Starter customers can export their API call log as CSV once a day.

## Usage

Nobody used it in the last two quarters (see [interviews Q1 2026](../research/interviews-q1.md)).
`;

export const PAGES: SeedPage[] = [
  { path: 'eng/runbooks/deploy-payments.md', content: DEPLOY_PAYMENTS },
  { path: 'eng/runbooks/incident-response.md', content: INCIDENT_RESPONSE },
  { path: 'eng/runbooks/database-failover.md', content: DATABASE_FAILOVER },
  { path: 'eng/architecture/payments-service.md', content: PAYMENTS_SERVICE },
  { path: 'eng/architecture/event-bus.md', content: EVENT_BUS },
  { path: 'eng/decisions/2025-11-postgres-16.md', content: POSTGRES_16 },
  { path: 'eng/decisions/2026-01-feature-flags.md', content: FEATURE_FLAGS },
  { path: 'eng/onboarding/on-call.md', content: ON_CALL },
  { path: 'product/roadmap-2026.md', content: ROADMAP },
  { path: 'product/pricing.md', content: PRICING },
  { path: 'product/research/interviews-q1.md', content: INTERVIEWS },
  { path: 'product/specs/usage-billing.md', content: USAGE_BILLING },
  { path: 'product/specs/starter-export.md', content: STARTER_EXPORT },
];

/** The owner's question that opens the thread of the deploy runbook. */
export const THREAD_OPENER = 'The canary step still says 5% of traffic for ten minutes. Since the feature flag decision, do we also watch the flag cohort?';

/** The human editor's follow-up, mentioning the writing agent. */
export const EDITOR_ASK =
  '@Scribe can you add the flag cohort check to the canary step of this runbook, and record the canary change as a decision? Keep the rollback section as it is.';

/** The writing agent's update of the deploy runbook: one step changed. */
export function deployRunbookUpdated(): string {
  return DEPLOY_PAYMENTS.replace(
    '3. Watch the canary (5% of traffic) for ten minutes: error rate below 0.5%, p99 below 400 ms.',
    '3. Watch the canary (5% of traffic) for ten minutes: error rate below 0.5%, p99 below 400 ms,\n   for all traffic and for the cohort of every flag turned on in this release.',
  );
}

/** The decision page the writing agent creates. */
export const CANARY_DECISION = `---
title: 'Decision: canary watches flag cohorts'
tags: [decision, deploy]
status: accepted
---
# Decision: canary watches flag cohorts

Accepted March 2026.

## Context

Since [feature flags for risky changes](2026-01-feature-flags.md), a release can look healthy
while a flag's cohort fails.

## Decision

The canary step of [[deploy-payments]] checks error rate and p99 for every flag cohort turned on
in the release, as well as for all traffic.
`;

/** The propose-only agent's change of the roadmap (it may not write): an open question answered by research. */
export function roadmapProposed(): string {
  return ROADMAP.replace(
    '- Which regions get local currency first after the EU?\n',
    '- Which regions get local currency first after the EU?\n- Should usage billing let customers set a monthly cap? Interviews Q1 2026 say yes.\n',
  );
}

export const LOG_ENTRY = 'Canary step of the payments deploy now watches flag cohorts; decision recorded in eng/decisions/2026-03-canary-flag-cohorts.md.';
