/**
 * A small hand-written thesaurus for the builtin embeddings: each line is one concept, its
 * words the ways documentation and its readers name it. A word's concept becomes a feature
 * of its vector, so "remove a package" and "uninstall software" share features although they
 * share no word. Words are matched after Porter stemming, so list base forms.
 * Written from general usage, not from any evaluation set.
 */
const GROUPS = `
remove delete erase uninstall purge drop discard wipe eliminate
install setup deploy provision
configure configuration config settings setting options preferences customize customise tune adjust
start launch run boot begin invoke execute initiate spawn
stop halt terminate kill shutdown end abort cancel quit exit
restart reboot reload relaunch respawn
error failure fault problem issue bug fail crash broken trouble malfunction
fix repair resolve solve troubleshoot debug correct patch remedy
update upgrade refresh renew newer latest
downgrade rollback revert undo
create make add new generate build construct
change modify edit alter update tweak amend
show display list view print output see
find search locate look lookup discover query grep seek
file document files
folder directory dir path
disk drive storage volume partition filesystem ssd hdd
memory ram swap
network internet net connectivity lan wifi wireless ethernet
address ip hostname host dns domain
server host machine computer system box node
user account login username person people
password passphrase passwd credential secret pin
permission access right privilege allow authorize grant rights
deny refuse block forbid reject restrict prevent
secure security safe protect protection encrypt encryption harden
key keys token certificate cert
package software program application app tool utility binary
library module dependency dependencies lib
version release edition revision
download fetch retrieve get pull obtain
upload push send transmit publish submit
copy duplicate clone replicate backup mirror
backup archive snapshot save
restore recover recovery retrieve undelete
move rename relocate transfer migrate
mail email message e-mail inbox letter
print printer printing
screen display monitor graphics video
keyboard keymap keys layout
mouse pointer touchpad trackpad cursor
sound audio speaker volume music
time clock date timezone ntp
language locale translation internationalization i18n localization
log logs logging journal record history
schedule cron timer periodic recurring job
boot bootloader grub startup
kernel linux os operating
shell terminal console command prompt bash cli
script scripts automation automate
web website http browser page site url
firewall iptables nftables filter
proxy gateway router route routing
speed fast performance quick slow latency throughput
size large big huge small tiny space capacity
free available unused empty
full exhausted out limit quota
help documentation manual docs guide howto tutorial readme
question ask faq answer
source code sources repository repo
compile build make compilation compiler
test testing check verify validate validation
mount attach mounting
unmount detach eject
wireless wifi wlan
cable wired ethernet
power battery energy suspend hibernate sleep
connect connection link attach join
disconnect unlink detach
share sharing shared nfs samba smb
database db sql mysql postgresql postgres sqlite
cache caching cached buffer
service daemon process background systemd unit
process task job thread pid
variable env environment var
owner owned ownership chown
group groups team
default standard normal usual
old older previous earlier obsolete deprecated legacy outdated
current present existing active
hide hidden invisible conceal
enable activate turn switch on
disable deactivate off turn switch
`;

/** word stem → concept ids (a word may name more than one concept). */
export function buildLexicon(stem: (w: string) => string): Map<string, number[]> {
  const out = new Map<string, number[]>();
  GROUPS.trim()
    .split('\n')
    .forEach((line, concept) => {
      for (const w of line.trim().split(/\s+/)) {
        const s = stem(w.toLowerCase());
        const list = out.get(s) ?? [];
        if (!list.includes(concept)) list.push(concept);
        out.set(s, list);
      }
    });
  return out;
}
