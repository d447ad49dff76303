"""Push: providers telling us a calendar changed. `channels` opens, renews and closes each OAuth
provider's channel or subscription; `endpoints` receives the notifications, which only ask for a sync."""
